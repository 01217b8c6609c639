package dm

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testAgent is a target with id_ext = ioc_guid = 0002c90300a0b0c1 and a second port
// (id_ext 0002c90300a0b0c9) on an ib listener at port 5555, and a third port with its own
// ioc_guid: two I/O controllers.
func testAgent() *Agent {
	return &Agent{
		IOCs: []IOC{
			{GUID: 0x0002c90300a0b0c1, Services: []Service{
				{IDExt: 0x0002c90300a0b0c1, ServiceID: 0x13f15b3},
				{IDExt: 0x0002c90300a0b0c9, ServiceID: 0x13f15b3},
			}},
			{GUID: 0x0002c90300a0b0d0, Services: []Service{{IDExt: 0x0002c90300a0b0d0, ServiceID: 0x13f15b3}}},
		},
		Profile: Profile{VendorID: 0x02c9, DeviceID: 0x1017, DeviceVersion: 0, SendQueueDepth: 128,
			SendSize: 8276, RDMASize: 8 << 20, IDString: "srptarget"},
	}
}

func unhex(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(parts, ""))
	require.NoError(t, err)
	return b
}

func get(t *testing.T, a *Agent, method uint8, attr uint16, mod uint32) MAD {
	t.Helper()
	req, rsp := make(MAD, MADSize), make(MAD, MADSize)
	NewRequest(req, ClassDeviceMgmt, 1, method, attr, mod, 0x1122334455667788)
	require.True(t, a.Answer(req, rsp))
	return rsp
}

// TestAnswerGolden: the answers byte by byte, against the kernel's structures (include/rdma/
// ib_mad.h struct ib_mad_hdr, drivers/infiniband/ulp/srpt/ib_dm_mad.h) and ib_srpt's values.
func TestAnswerGolden(t *testing.T) {
	a := testAgent()
	require.NoError(t, a.Check())

	// struct ib_mad_hdr of the answer: base version 1, class 6, class version 1, GetResp,
	// status, class specific, the request's TID, attribute, reserved, modifier.
	hdr := func(status, attr string, mod string) []byte {
		return unhex(t, "01", "06", "01", "81", status, "0000", "1122334455667788", attr, "0000", mod)
	}
	rsv := make([]byte, 40) // RMPP header and the DM header: zero

	rsp := get(t, a, MethodGet, AttrIOCProfile, 2)
	require.Equal(t, hdr("0000", "0011", "00000002"), []byte(rsp[:24]))
	require.Equal(t, rsv, []byte(rsp[24:64]))
	wantIOC := unhex(t,
		"0002c90300a0b0d0", // guid
		"000002c9",         // vendor_id
		"00001017",         // device_id
		"0000", "0000",     // device_version, reserved1
		"000002c9",     // subsys_vendor_id (the vendor id, as ib_srpt)
		"00000000",     // subsys_device_id
		"0100", "609e", // io_class SRP rev 16a, io_subclass
		"0108", "0001", // protocol, protocol_version
		"0000", "0000", // service_conn, initiators_supported
		"0080", "00", "04", // send_queue_depth 128, reserved2, rdma_read_depth 4
		"00002054",       // send_size 8276
		"00800000",       // rdma_size 8 MiB
		"2b", "00", "01", // op_cap_mask, svc_cap_mask, num_svc_entries
		"000000000000000000", // reserved3
	)
	wantIOC = append(wantIOC, []byte("srptarget")...)
	wantIOC = append(wantIOC, make([]byte, 64-len("srptarget"))...)
	require.Len(t, wantIOC, IOCProfileSize)
	require.Equal(t, wantIOC, []byte(rsp[64:64+IOCProfileSize]))
	require.Equal(t, make([]byte, 192-IOCProfileSize), []byte(rsp[64+IOCProfileSize:]))

	rsp = get(t, a, MethodGet, AttrIOUnitInfo, 0)
	require.Equal(t, hdr("0000", "0010", "00000000"), []byte(rsp[:24]))
	// change_id 1, max_controllers 16, op_rom 0, slots 1 and 2 present (one nibble each).
	require.Equal(t, unhex(t, "0001", "10", "00", "11"), []byte(rsp[64:69]))
	require.Equal(t, make([]byte, 192-5), []byte(rsp[69:]))

	rsp = get(t, a, MethodGet, AttrSvcEntries, SvcEntriesMod(1, 0, 1))
	require.Equal(t, hdr("0000", "0012", "00010100"), []byte(rsp[:24]))
	name := func(s string) []byte { return append([]byte(s), make([]byte, 40-len(s))...) }
	want := append(name("SRP.T10:0002c90300a0b0c1"), unhex(t, "00000000013f15b3")...)
	want = append(want, name("SRP.T10:0002c90300a0b0c9")...)
	want = append(want, unhex(t, "00000000013f15b3")...)
	require.Equal(t, want, []byte(rsp[64:64+2*SvcEntrySize]))
	require.Equal(t, make([]byte, 192-2*SvcEntrySize), []byte(rsp[64+2*SvcEntrySize:]))

	rsp = get(t, a, MethodGet, AttrClassPortInfo, 0)
	require.Equal(t, hdr("0000", "0001", "00000000"), []byte(rsp[:24]))
	// base_version 1, class_version 1, capability_mask 0, resp time value 20.
	require.Equal(t, unhex(t, "01", "01", "0000", "00000014"), []byte(rsp[64:72]))
	require.Equal(t, make([]byte, ClassPortInfoSize-8), []byte(rsp[72:64+ClassPortInfoSize]))
}

// TestAnswerStatus: what ib_srpt refuses, refused the same way.
func TestAnswerStatus(t *testing.T) {
	a := testAgent()
	for _, tc := range []struct {
		name   string
		method uint8
		attr   uint16
		mod    uint32
		want   Status
	}{
		{"SET", MethodSet, AttrIOUnitInfo, 0, StatusUnsupMethodAttr},
		{"SET ClassPortInfo (srp_daemon sets its trap address)", MethodSet, AttrClassPortInfo, 0, StatusUnsupMethodAttr},
		{"other method", 0x05, AttrIOUnitInfo, 0, StatusUnsupMethod},
		{"unknown attribute", MethodGet, 0x0013, 0, StatusUnsupMethodAttr},
		{"IOC slot 0", MethodGet, AttrIOCProfile, 0, StatusInvalidField},
		{"IOC slot 17", MethodGet, AttrIOCProfile, 17, StatusInvalidField},
		{"IOC empty slot 3", MethodGet, AttrIOCProfile, 3, StatusNoIOC},
		{"entries slot 0", MethodGet, AttrSvcEntries, SvcEntriesMod(0, 0, 0), StatusInvalidField},
		{"entries empty slot", MethodGet, AttrSvcEntries, SvcEntriesMod(3, 0, 0), StatusNoIOC},
		{"entries lo > hi", MethodGet, AttrSvcEntries, SvcEntriesMod(1, 1, 0), StatusNoIOC},
		{"entries beyond the last", MethodGet, AttrSvcEntries, SvcEntriesMod(1, 0, 2), StatusNoIOC},
		{"entries: one", MethodGet, AttrSvcEntries, SvcEntriesMod(2, 0, 0), StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rsp := get(t, a, tc.method, tc.attr, tc.mod)
			require.Equal(t, tc.want, rsp.Status())
			require.Equal(t, uint8(MethodGetResp), rsp.Method())
			require.Equal(t, uint64(0x1122334455667788), rsp.TID())
			if tc.want != StatusOK {
				require.Equal(t, make([]byte, 192), []byte(rsp.DMData()), "no data with an error")
			}
		})
	}
	// Five entries at once do not fit in one MAD.
	big := &Agent{IOCs: []IOC{{GUID: 1, Services: make([]Service, 6)}}}
	require.Equal(t, StatusInvalidField, get(t, big, MethodGet, AttrSvcEntries, SvcEntriesMod(1, 0, 4)).Status())

	// Not answered: another class, a response, short buffers.
	req, rsp := make(MAD, MADSize), make(MAD, MADSize)
	NewRequest(req, ClassSubnAdm, 2, MethodGet, AttrNodeRecord, 0, 1)
	require.False(t, a.Answer(req, rsp))
	NewRequest(req, ClassDeviceMgmt, 1, MethodGetResp, AttrIOUnitInfo, 0, 1)
	require.False(t, a.Answer(req, rsp))
	NewRequest(req, ClassDeviceMgmt, 1, MethodGet, AttrIOUnitInfo, 0, 1)
	require.False(t, a.Answer(req[:255], rsp))
	require.False(t, a.Answer(req, rsp[:255]))
}

func TestAgentCheck(t *testing.T) {
	require.Error(t, (&Agent{}).Check())
	require.Error(t, (&Agent{IOCs: make([]IOC, 17)}).Check())
	require.Error(t, (&Agent{IOCs: []IOC{{GUID: 1}}}).Check())
	require.Error(t, (&Agent{IOCs: []IOC{{GUID: 1, Services: make([]Service, 256)}}}).Check())
}

// agentEx answers through an Agent directly, as the fabric would carry the MADs.
type agentEx struct {
	a   *Agent
	n   int
	err error
}

func (e *agentEx) Exchange(req MAD) (MAD, error) {
	e.n++
	if e.err != nil {
		return nil, e.err
	}
	rsp := make(MAD, MADSize)
	if !e.a.Answer(req, rsp) {
		return nil, errors.New("no answer")
	}
	return rsp, nil
}

// TestDiscover: the initiator's side, against the agent: the targets srp_daemon would find,
// and its lines.
func TestDiscover(t *testing.T) {
	a := testAgent()
	// 6 services on the first controller: two ServiceEntries GETs (0-3, 4-5).
	for i := 2; i < 6; i++ {
		a.IOCs[0].Services = append(a.IOCs[0].Services, Service{IDExt: 0x100 + uint64(i), ServiceID: 0x13f1000 + uint64(i)})
	}
	ex := &agentEx{a: a}
	d := &Discoverer{Ex: ex}
	got, err := d.Discover()
	require.NoError(t, err)
	require.Len(t, got, 7)
	require.Equal(t, 1+2+2+1, ex.n, "IOUnitInfo, two profiles, 2+1 ServiceEntries")
	require.Equal(t, Target{Slot: 1, IOCGUID: 0x0002c90300a0b0c1, IOClass: IOClassSRP, SendSize: 8276, IDString: "srptarget",
		IDExt: "0002c90300a0b0c1", ServiceID: 0x13f15b3}, got[0])
	require.Equal(t, "0000000000000105", got[5].IDExt)
	require.Equal(t, 2, got[6].Slot)
	gid := netip.MustParseAddr("fe80::2:c903:a0:b0c2")
	require.Equal(t, "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dgid=fe800000000000000002c90300a0b0c2,pkey=ffff,service_id=00000000013f15b3",
		got[0].Line(gid, 0xffff))
	rev10 := got[0]
	rev10.IOClass = ioClassSRPRev10
	require.True(t, strings.HasSuffix(rev10.Line(gid, 0xffff), ",service_id=00000000013f15b3,io_class=ff00"))

	// A port without an agent: the exchange's error.
	_, err = (&Discoverer{Ex: &agentEx{err: errors.New("timed out")}}).Discover()
	require.EqualError(t, err, "timed out")
	// An agent that answers with an error status.
	_, err = (&Discoverer{Ex: &agentEx{a: &Agent{IOCs: []IOC{{GUID: 1, Services: []Service{{}}}}}}, TID: 10}).get(AttrIOCProfile, 5)
	var se *StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, StatusNoIOC, se.Status)
	require.EqualError(t, err, "dm: GET IOControllerProfile(0x5): no I/O controller in this slot")
}

func TestNodeRecord(t *testing.T) {
	m := make(MAD, MADSize)
	NodeRecordRequest(m, 3, 7)
	// SA class 3, class version 2, GET, NodeRecord, component mask LID, the LID first.
	require.Equal(t, unhex(t, "01", "03", "02", "01", "0000", "0000", "0000000000000007", "0011", "0000", "00000000"), []byte(m[:24]))
	require.Equal(t, unhex(t, "0000000000000001"), []byte(m[48:56]))
	require.Equal(t, unhex(t, "0003"), []byte(m[56:58]))
	// The answer: LID 3, reserved, NodeInfo with the port GUID at 20.
	rsp := make(MAD, MADSize)
	copy(rsp, m)
	rsp.SetMethod(MethodGetResp)
	copy(rsp[56+4+20:], unhex(t, "0000000000100003"))
	g, err := NodeRecordPortGUID(rsp)
	require.NoError(t, err)
	require.Equal(t, uint64(0x100003), g)
	rsp.SetStatus(0x0c)
	_, err = NodeRecordPortGUID(rsp)
	require.Error(t, err)
}

// FuzzAnswer: any 256 bytes from the fabric get an answer that is a GetResp of the request's
// TID and attribute, or none, and never a panic.
func FuzzAnswer(f *testing.F) {
	req := make(MAD, MADSize)
	NewRequest(req, ClassDeviceMgmt, 1, MethodGet, AttrSvcEntries, SvcEntriesMod(1, 0, 3), 9)
	f.Add([]byte(req))
	NewRequest(req, ClassDeviceMgmt, 1, MethodGet, AttrIOCProfile, 0xffffffff, 9)
	f.Add([]byte(req))
	a := testAgent()
	f.Fuzz(func(t *testing.T, b []byte) {
		rsp := make(MAD, MADSize)
		if !a.Answer(MAD(b), rsp) {
			return
		}
		m := MAD(b)
		require.Equal(t, uint8(MethodGetResp), rsp.Method())
		require.Equal(t, m.TID(), rsp.TID())
		require.Equal(t, m.AttrID(), rsp.AttrID())
	})
}

// fuzzEx answers every GET with the request's header and data from the fuzzer.
type fuzzEx struct {
	data []byte
	n    int
}

func (e *fuzzEx) Exchange(req MAD) (MAD, error) {
	e.n++
	rsp := make(MAD, MADSize)
	copy(rsp, req)
	rsp.SetMethod(MethodGetResp)
	copy(rsp.DMData(), e.data)
	return rsp, nil
}

// FuzzDiscover: whatever the probed port answers, Discover ends, without a panic, after at
// most one IOUnitInfo GET and, per slot the answer can name (255), one profile and the
// ServiceEntries GETs of at most 255 entries.
func FuzzDiscover(f *testing.F) {
	f.Add(unhex(&testing.T{}, "0001ff00ffffffff"))
	f.Add([]byte{0, 1, 16, 0, 0x10})
	f.Fuzz(func(t *testing.T, data []byte) {
		ex := &fuzzEx{data: data}
		targets, err := (&Discoverer{Ex: ex}).Discover()
		require.NoError(t, err)
		require.LessOrEqual(t, ex.n, 1+255*(1+64))
		for _, tg := range targets {
			require.LessOrEqual(t, len(tg.IDExt), 16)
		}
	})
}
