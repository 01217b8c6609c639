package umad

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUserMADHdr: the header of struct ib_user_mad_hdr_old (include/uapi/rdma/ib_user_mad.h)
// byte by byte, as a response to a request from LID 4 goes out, and as a received one reads.
func TestUserMADHdr(t *testing.T) {
	h := make(userMADHdr, HdrSize)
	from := Addr{QPN: 1, LID: 4, SL: 2}
	h.put(7, 0, 0, from.Reply())
	ne := func(v uint32) string {
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], v)
		return hex.EncodeToString(b[:])
	}
	want := strings.Join([]string{
		ne(7), ne(0), ne(0), ne(0), ne(0), // id, status, timeout_ms, retries, length
		"00000001",                         // qpn
		"80010000",                         // qkey: QP1's
		"0004",                             // lid
		"02", "00", "00", "00", "00", "00", // sl, path_bits, grh_present, gid_index, hop_limit, traffic_class
		strings.Repeat("00", 16), // gid
		"00000000",               // flow_label
	}, "")
	require.Equal(t, want, hex.EncodeToString(h))

	// With a GRH, and back.
	g := Addr{QPN: 1, QKey: QP1QKey, LID: 0x12, GRH: true, GIDIndex: 1, HopLimit: 64, TClass: 3,
		GID: netip.MustParseAddr("fe80::2:c903:a0:b0c2"), FlowLabel: 0x12345}
	h.put(1, 1000, 3, g)
	require.Equal(t, uint32(1), h.agent())
	require.Equal(t, uint32(1000), binary.NativeEndian.Uint32(h[8:]))
	require.Equal(t, uint32(3), binary.NativeEndian.Uint32(h[12:]))
	require.Equal(t, "fe800000000000000002c90300a0b0c2", hex.EncodeToString(h[36:52]))
	require.Equal(t, g, h.addr())
	binary.NativeEndian.PutUint32(h[4:], 110) // ETIMEDOUT from the kernel
	require.Equal(t, uint32(110), h.status())
}

func TestPortInfo(t *testing.T) {
	p := PortInfo{CA: "mlx5_0", Port: 1}
	require.Equal(t, "mlx5_0/1", p.Name())
	for ll, want := range map[string]bool{"": true, "InfiniBand": true, "IB": true, "Ethernet": false} {
		p.LinkLayer = ll
		require.Equal(t, want, p.InfiniBand(), ll)
	}
}
