package scsi

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// prOutTimeBound is the longest any PERSISTENT RESERVE OUT may take, whatever its parameter
// list: the fencing path of a cluster must not wait behind another initiator's list. It
// separates bounded work from work that grows with the list: a command takes microseconds, the
// longest list (maxDataOut, 8 MiB, 349,524 TransportIDs) a few milliseconds under -race, and a
// parse that grew with the square of the list would take minutes. The margin is for -race on a
// loaded machine, where a goroutine can wait more than 100 ms for a CPU (seen at load 15 on two
// cores).
const prOutTimeBound = 500 * time.Millisecond

// maxDataOut is the largest data-out the transport hands over (limits.max_transfer_size's
// default).
const maxDataOut = 8 << 20

// specIPTParams is a REGISTER parameter list with SPEC_I_PT (and flags) naming count initiator
// ports, all distinct and none of A, B, C; the TransportID at index dup (when 0 < dup < count)
// repeats the one before it.
func specIPTParams(saKey uint64, flags byte, count, dup int) []byte {
	p := make([]byte, prOutSpecIPTHeaderLength+count*srpTransportIDLength)
	copy(p, prParams(0, saKey, prOutSpecIPT|flags))
	binary.BigEndian.PutUint32(p[24:], uint32(count*srpTransportIDLength))
	for i := range count {
		var ini [16]byte
		n := i
		if i == dup && dup > 0 {
			n = i - 1
		}
		binary.BigEndian.PutUint32(ini[0:], uint32(n)+1)
		ini[15] = 0x77
		putSRPTransportID(p[prOutSpecIPTHeaderLength+i*srpTransportIDLength:], ini)
	}
	return p
}

// timedPROut sends PERSISTENT RESERVE OUT and fails the test when it takes longer than
// prOutTimeBound.
func timedPROut(t testing.TB, m *LUNMap, n *Nexus, sa, typ byte, params []byte) *Command {
	t.Helper()
	start := time.Now()
	c := sendPROut(m, n, sa, typ, params)
	took := time.Since(start)
	require.Less(t, took, prOutTimeBound, "PERSISTENT RESERVE OUT with a %d-byte parameter list", len(params))
	return c
}

// allKeys returns the generation and every key of READ KEYS (through A).
func allKeys(t testing.TB, m *LUNMap) (uint32, []uint64) {
	t.Helper()
	c := run(m, prNexusA, 0, prInCDB(0, 8+8*maxPRRegistrations), nil, 8+8*maxPRRegistrations)
	requireGood(t, c)
	d := data(c)
	require.Len(t, d, 8+int(binary.BigEndian.Uint32(d[4:])))
	var keys []uint64
	for i := 8; i < len(d); i += 8 {
		keys = append(keys, binary.BigEndian.Uint64(d[i:]))
	}
	return binary.BigEndian.Uint32(d), keys
}

// TestPRSpecIPTBounds: a list naming more initiator ports than there is room for is refused
// with INSUFFICIENT REGISTRATION RESOURCES, whatever its length; one that fits is taken whole;
// a parameter list longer than any PERSISTENT RESERVE OUT can use is refused before it is
// parsed; duplicates and overlapping registrations are refused where they are.
func TestPRSpecIPTBounds(t *testing.T) {
	port2 := &TargetPort{Name: "port2", RelativeID: 2}
	a2 := &Nexus{InitiatorPort: "A via port 2", InitiatorID: prNexusA.InitiatorID, Port: port2}
	ownPort := cat(specIPTParams(keyC, 0, 3, -1), srpTID(prNexusC.InitiatorID)) // C names itself last
	binary.BigEndian.PutUint32(ownPort[24:], 4*24)
	cases := []struct {
		name   string
		from   *Nexus
		sa     byte
		params []byte
		reason Reason // ReasonNone: GOOD
		field  int    // the INVALID FIELD IN PARAMETER LIST byte, with bit
		bit    int
		keys   int // registrations afterwards
	}{
		// A and B are registered: C and 253 more fill the 256.
		{"253 TransportIDs fit", prNexusC, prOutRegister, specIPTParams(keyC, 0, 253, -1), ReasonNone, 0, 0, 256},
		{"254 do not", prNexusC, prOutRegister, specIPTParams(keyC, 0, 254, -1), ReasonInsufficientRegistrationResources, 0, 0, 2},
		{"the longest list that can be parsed", prNexusC, prOutRegister, specIPTParams(keyC, 0, maxPRRegistrations, -1), ReasonInsufficientRegistrationResources, 0, 0, 2},
		{"8 MiB of TransportIDs", prNexusC, prOutRegister, specIPTParams(keyC, 0, (maxDataOut-28)/24, -1), ReasonInsufficientRegistrationResources, 0, 0, 2},
		{"8 MiB of TransportIDs, all target ports", prNexusC, prOutRegister, specIPTParams(keyC, prOutAllTgPt, (maxDataOut-28)/24, -1), ReasonInsufficientRegistrationResources, 0, 0, 2},
		{"8 MiB without SPEC_I_PT", prNexusC, prOutRegister, cat(prParams(0, keyC, 0), zeros(maxDataOut-24)), ReasonParameterListLengthError, 0, 0, 2},
		{"8 MiB for REGISTER AND MOVE", prNexusA, prOutRegisterAndMove, cat(moveParams(keyA, keyC, 0, 1, srpTID(prNexusC.InitiatorID)), zeros(maxDataOut-48)), ReasonParameterListLengthError, 0, 0, 2},
		{"8 MiB for PREEMPT", prNexusA, prOutPreempt, cat(prParams(keyA, keyB, prOutSpecIPT), zeros(maxDataOut-24)), ReasonParameterListLengthError, 0, 0, 2},
		{"a duplicate late in the list", prNexusC, prOutRegister, specIPTParams(keyC, 0, 200, 150), ReasonInvalidFieldInParameterList, 28 + 150*24, -1, 2},
		{"the caller's own port", prNexusC, prOutRegister, ownPort, ReasonInvalidFieldInParameterList, 28 + 3*24, -1, 2},
		{"an initiator registered through another port, all target ports", prNexusC, prOutRegister,
			cat(prParams(0, keyC, prOutSpecIPT|prOutAllTgPt), []byte{0, 0, 0, 48}, srpTID(prInitiator(0xD4)), srpTID(prNexusB.InitiatorID)),
			ReasonInvalidFieldInParameterList, 28 + 24, -1, 2},
		{"all target ports from a port registered through another", a2, prOutRegister, prParams(0, 0x2A, prOutAllTgPt),
			ReasonInvalidFieldInParameterList, 20, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, m := prMap(t, 0, nil)
			clearPowerOnUA(t, m, a2)
			gen0, _ := allKeys(t, m)
			c := timedPROut(t, m, tc.from, tc.sa, 0, tc.params)
			switch tc.reason {
			case ReasonNone:
				requireGood(t, c)
			case ReasonInvalidFieldInParameterList:
				requireField(t, c, tc.reason, false, tc.field, tc.bit)
			default:
				requireSense(t, c, tc.reason)
			}
			gen, keys := allKeys(t, m)
			require.Len(t, keys, tc.keys)
			if tc.reason != ReasonNone {
				require.Equal(t, gen0, gen, "nothing changed")
			}
		})
	}
}

// TestPRSpecIPTAttack is the attack of an initiator that sends REGISTER with SPEC_I_PT and
// 8 MiB of distinct TransportIDs, one after the other, while another initiator fences through
// the same logical unit: every one of the attacker's commands is answered within the bound,
// and so is every REGISTER of the victim meanwhile.
func TestPRSpecIPTAttack(t *testing.T) {
	_, m := prMap(t, PRTypeWriteExclusiveRegistrantsOnly, nil)
	huge := specIPTParams(keyC, 0, (maxDataOut-28)/24, -1)
	fits := specIPTParams(keyC, 0, 250, -1) // the most work a list that fits can ask for
	var atomicKey atomic.Uint64             // B's key, which the victim keeps changing
	atomicKey.Store(keyB)
	var stop atomic.Bool
	var attacks atomic.Int64
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for i := 0; !stop.Load(); i++ {
			list := huge
			if i%2 == 1 {
				list = fits
			}
			start := time.Now()
			c := sendPROut(m, prNexusC, prOutRegister, 0, list)
			if took := time.Since(start); took >= prOutTimeBound {
				errs <- fmt.Errorf("the attacker's %d-byte list took %v, more than %v", len(list), took, prOutTimeBound)
				return
			}
			if c.Status == StatusGood {
				// The 251 registrations went in: B preempts them so that the next list
				// is parsed again.
				sendPROut(m, prNexusB, prOutPreempt, 0, prParams(atomicKey.Load(), keyC, 0))
			}
			attacks.Add(1)
		}
	}()
	key := uint64(keyB)
	var worst time.Duration
	// 200 REGISTERs, and more until the attacker has had a few lists answered meanwhile: on
	// a loaded machine its goroutine may not have run yet after 200 (bounded by 30 s).
	begin := time.Now()
	for i := 0; i < 200 || attacks.Load() < 3 && time.Since(begin) < 30*time.Second; i++ {
		next := key + 1
		start := time.Now()
		c := timedPROut(t, m, prNexusB, prOutRegister, 0, prParams(key, next, 0))
		worst = max(worst, time.Since(start))
		requireGood(t, c)
		key = next
		atomicKey.Store(key)
	}
	t.Logf("the victim's slowest REGISTER: %v", worst)
	stop.Store(true)
	for err := range errs {
		t.Fatal(err)
	}
	require.Positive(t, attacks.Load())
	_, keys := allKeys(t, m)
	require.Contains(t, keys, key, "the victim's last key is in force")
}

// BenchmarkPROutSpecIPT measures REGISTER with SPEC_I_PT naming 253 initiator ports, the
// longest list that is taken, which is the most work a PERSISTENT RESERVE OUT does under the
// reservations' lock.
func BenchmarkPROutSpecIPT(b *testing.B) {
	lu := newTestLU(b, 1000, 512, nil)
	m := newTestMap(b, lu)
	clearPowerOnUA(b, m, prNexusA)
	clearPowerOnUA(b, m, prNexusC)
	requireGood(b, sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	p := specIPTParams(keyC, 0, maxPRRegistrations-2, -1)
	b.ResetTimer()
	for range b.N {
		requireGood(b, sendPROut(m, prNexusC, prOutRegister, 0, p))
		b.StopTimer()
		requireGood(b, sendPROut(m, prNexusA, prOutPreempt, 0, prParams(keyA, keyC, 0)))
		run(m, prNexusC, 0, make([]byte, 6), nil, 0) // REGISTRATIONS PREEMPTED
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(maxPRRegistrations-2), "ns/TransportID")
}
