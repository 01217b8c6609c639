package scsi

import (
	"testing"

	"github.com/srptarget/srptarget/backstore"
)

// benchLU makes a logical unit of 1 GiB in 512-byte blocks over the named backstore, with the
// power-on unit attention of testNexus consumed.
func benchLU(b *testing.B, store string) *LUNMap {
	b.Helper()
	const size = 1 << 30
	var bs backstore.Backstore
	var err error
	switch store {
	case "null":
		bs, err = backstore.NewNull(size, 512)
	default:
		bs, err = backstore.NewMemory(size, 512)
	}
	if err != nil {
		b.Fatal(err)
	}
	lu, err := NewLogicalUnit(Config{Backstore: bs, Serial: "bench", WriteCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lu.Close() })
	m := newTestMap(b, lu)
	c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), CDB: make([]byte, 6)}
	m.Execute(c) // consumes the unit attention
	return m
}

// benchIO runs cdb through LUNMap.Execute b.N times with one reused Command, as a transport that
// pools its commands does, 8 blocks (4 KiB) a time, moving through the first 64 MiB.
func benchIO(b *testing.B, store string, write bool) { benchIOWith(b, store, write, nil) }

// benchIOWith is benchIO with setup run on the map first.
func benchIOWith(b *testing.B, store string, write bool, setup func(*LUNMap)) {
	m := benchLU(b, store)
	if setup != nil {
		setup(m)
	}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	cdb := cdb10(0x28, 0, 0, 8)
	if write {
		cdb[0] = 0x2A
	}
	c := &Command{DataIn: buf}
	run := func(i int) {
		lba := uint32(i%16384) * 8
		cdb[2], cdb[3], cdb[4], cdb[5] = byte(lba>>24), byte(lba>>16), byte(lba>>8), byte(lba)
		c.Reset()
		c.Nexus, c.LUN, c.CDB = testNexus, EncodeLUN(0), cdb
		if write {
			c.DataOut = buf
		} else {
			c.DataIn = buf
		}
		m.Execute(c)
		if c.Status != StatusGood {
			b.Fatalf("status %v sense % x", c.Status, c.SenseData())
		}
	}
	for i := 0; i < 16384; i++ { // warm up: the memory backstore allocates its chunks once
		run(i)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i)
	}
}

func BenchmarkRead10_4K(b *testing.B) {
	for _, store := range []string{"null", "memory"} {
		b.Run(store, func(b *testing.B) { benchIO(b, store, false) })
	}
}

func BenchmarkWrite10_4K(b *testing.B) {
	for _, store := range []string{"null", "memory"} {
		b.Run(store, func(b *testing.B) { benchIO(b, store, true) })
	}
}

// BenchmarkWrite10_4KReserved writes from the holder of a WRITE EXCLUSIVE - REGISTRANTS ONLY
// reservation with another initiator registered: the conflict check then looks at the
// registrations for every command.
func BenchmarkWrite10_4KReserved(b *testing.B) {
	benchIOWith(b, "null", true, func(m *LUNMap) {
		m.Execute(&Command{Nexus: otherNexus, LUN: EncodeLUN(0), CDB: make([]byte, 6)}) // its unit attention
		for _, cmd := range []*Command{
			{Nexus: testNexus, CDB: prOutCDB(prOutRegister, 0, 24), DataOut: prParams(0, keyA, 0)},
			{Nexus: otherNexus, CDB: prOutCDB(prOutRegister, 0, 24), DataOut: prParams(0, keyB, 0)},
			{Nexus: testNexus, CDB: prOutCDB(prOutReserve, PRTypeWriteExclusiveRegistrantsOnly, 24), DataOut: prParams(keyA, 0, 0)},
		} {
			cmd.LUN = EncodeLUN(0)
			m.Execute(cmd)
			if cmd.Status != StatusGood {
				b.Fatalf("setup: status %v sense % x", cmd.Status, cmd.SenseData())
			}
		}
	})
}

// BenchmarkWrite10_4KParallel writes from several goroutines at once, each with its own Command
// and nexus-wide task set, to show what the task set and the range lock cost under contention.
func BenchmarkWrite10_4KParallel(b *testing.B) {
	m := benchLU(b, "memory")
	b.SetBytes(4096)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		cdb := cdb10(0x2A, 0, 0, 8)
		c := &Command{}
		for i := 0; pb.Next(); i++ {
			c.Reset()
			c.Nexus, c.LUN, c.CDB, c.DataOut = testNexus, EncodeLUN(0), cdb, buf
			m.Execute(c)
			if c.Status != StatusGood {
				b.Fatalf("status %v", c.Status)
			}
		}
	})
}
