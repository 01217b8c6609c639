package verbs

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// goldenSockaddrIB is struct sockaddr_ib (include/rdma/ib.h) written out field by field for
// GID fe80::2:c903:a0:b0c2, P_Key 0xffff, service ID 0x00000000013f15b3 (port 5555), a full
// mask, on a little-endian host (family and scope id are host order).
func goldenSockaddrIB(t *testing.T) []byte {
	t.Helper()
	fields := []string{
		"1b00",                             // sib_family = AF_IB (27)
		"ffff",                             // sib_pkey
		"00000000",                         // sib_flowinfo
		"fe800000000000000002c90300a0b0c2", // sib_addr
		"00000000013f15b3",                 // sib_sid
		"ffffffffffffffff",                 // sib_sid_mask
		"0000000000000000",                 // sib_scope_id
	}
	b, err := hex.DecodeString(strings.Join(fields, ""))
	require.NoError(t, err)
	require.Len(t, b, sockaddrIBSize)
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		b[0], b[1] = b[1], b[0] // big-endian host
	}
	return b
}

var testGID = netip.MustParseAddr("fe80::2:c903:a0:b0c2")

func TestSockaddrIBGolden(t *testing.T) {
	want := goldenSockaddrIB(t)
	a := ib.IBAddr{GID: testGID, PKey: 0xffff, ServiceID: ib.IBServiceID(5555)}
	sa, err := encodeSockaddrIB(a)
	require.NoError(t, err)
	require.Equal(t, want, sa[:sockaddrIBSize])
	require.Equal(t, make([]byte, sockaddrSize-sockaddrIBSize), sa[sockaddrIBSize:], "the rest of the storage stays zero")

	v := sockaddrIB(want)
	require.Equal(t, uint16(afIB), v.Family())
	require.Equal(t, uint16(0xffff), v.PKey())
	require.Equal(t, uint32(0), v.FlowInfo())
	require.Equal(t, testGID, v.GID())
	require.Equal(t, uint64(0x13f15b3), v.SID())
	require.Equal(t, ^uint64(0), v.SIDMask())
	require.Zero(t, v.ScopeID())

	got, ok := decodeSockaddrIB(want)
	require.True(t, ok)
	require.Equal(t, a, got)
	require.Equal(t, netip.MustParseAddrPort("[fe80::2:c903:a0:b0c2]:5555"), ibAddrPort(got))
}

// TestSockaddrIBFields: every setter writes its own bytes only, in the byte order of the
// kernel's struct.
func TestSockaddrIBFields(t *testing.T) {
	b := make([]byte, sockaddrIBSize)
	s := sockaddrIB(b)
	s.SetFlowInfo(0x01020304)
	s.SetScopeID(0x1122334455667788)
	s.SetSIDMask(0xFFFFFFFFFFFF0000)
	s.SetPKey(0x8001)
	require.Equal(t, []byte{0x80, 0x01}, b[2:4])
	require.Equal(t, []byte{1, 2, 3, 4}, b[4:8])
	require.Equal(t, make([]byte, 16+8), b[8:32], "GID and SID untouched")
	require.Equal(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}, b[32:40])
	require.Equal(t, uint64(0x1122334455667788), binary.NativeEndian.Uint64(b[40:]))
	require.Equal(t, uint32(0x01020304), s.FlowInfo())
	require.Equal(t, uint64(0x1122334455667788), s.ScopeID())
}

func TestEncodeSockaddrIB(t *testing.T) {
	// The wildcard: zero GID, and a zero service ID leaves the mask zero too.
	sa, err := encodeSockaddrIB(ib.IBAddr{})
	require.NoError(t, err)
	s := sockaddrIB(sa[:])
	require.Equal(t, uint16(afIB), s.Family())
	require.Equal(t, netip.IPv6Unspecified(), s.GID())
	require.Zero(t, s.SID())
	require.Zero(t, s.SIDMask())

	for _, bad := range []string{"192.0.2.1", "::ffff:192.0.2.1", "fe80::1%eth0"} {
		_, err := encodeSockaddrIB(ib.IBAddr{GID: netip.MustParseAddr(bad)})
		require.ErrorIs(t, err, ib.ErrInvalidArgument, bad)
	}

	// Another family, or a short buffer, is not an AF_IB address.
	in4 := sockaddrIn(5555, [4]byte{192, 0, 2, 1})
	_, ok := decodeSockaddrIB(in4[:])
	require.False(t, ok)
	_, ok = decodeSockaddrIB(goldenSockaddrIB(t)[:47])
	require.False(t, ok)
	// and decodeSockaddr (the IP decoder) does not take an AF_IB one for an IP address.
	require.False(t, decodeSockaddr(goldenSockaddrIB(t)).IsValid())
}

func TestIBServiceID(t *testing.T) {
	require.Equal(t, uint64(0x00000000013f15b3), ib.IBServiceID(5555))
	p, ok := ib.IBServicePort(0x00000000013f15b3)
	require.True(t, ok)
	require.Equal(t, uint16(5555), p)
	for _, sid := range []uint64{0x0002c90300a0b0c1, 0x00000000010615b3, 0x01013f15b3} {
		_, ok := ib.IBServicePort(sid)
		require.False(t, ok, "%#x", sid)
	}
	require.Equal(t, netip.AddrPortFrom(testGID, 0), ibAddrPort(ib.IBAddr{GID: testGID, ServiceID: 0x0002c90300a0b0c1}))
}

func FuzzDecodeSockaddrIB(f *testing.F) {
	f.Add(make([]byte, 48))
	sa, _ := encodeSockaddrIB(ib.IBAddr{GID: testGID, PKey: 0x7fff, ServiceID: 0x13f0001})
	f.Add(sa[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := decodeSockaddrIB(b)
		if !ok {
			return
		}
		// What decodes encodes back to the same fields (flow info and scope aside).
		sa, err := encodeSockaddrIB(a)
		if err != nil {
			require.True(t, a.GID.Is4In6(), "%v: %v", a, err)
			return
		}
		back, ok := decodeSockaddrIB(sa[:])
		require.True(t, ok)
		require.Equal(t, a, back)
	})
}
