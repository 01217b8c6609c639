package verbs

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// fakeZones replaces the interface lookups with a fixed table for the test.
func fakeZones(t *testing.T) {
	t.Helper()
	oldIndex, oldName := zoneIndex, zoneName
	t.Cleanup(func() { zoneIndex, zoneName = oldIndex, oldName })
	byName := map[string]int{"dummy0": 7, "eth1": 3}
	zoneIndex = func(z string) (int, error) {
		if i, ok := byName[z]; ok {
			return i, nil
		}
		return 0, errors.New("no such interface")
	}
	zoneName = func(i int) string {
		for n, j := range byName {
			if i == j {
				return n
			}
		}
		return "idx" + strconv.Itoa(i)
	}
}

// want builds the expected sockaddr bytes field by field.
func sockaddrIn(port uint16, a [4]byte) sockaddr {
	var sa sockaddr
	binary.NativeEndian.PutUint16(sa[0:], 2)
	binary.BigEndian.PutUint16(sa[2:], port)
	copy(sa[4:], a[:])
	return sa
}

func sockaddrIn6(port uint16, a [16]byte, scope uint32) sockaddr {
	var sa sockaddr
	binary.NativeEndian.PutUint16(sa[0:], 10)
	binary.BigEndian.PutUint16(sa[2:], port)
	copy(sa[8:], a[:])
	binary.NativeEndian.PutUint32(sa[24:], scope)
	return sa
}

func TestEncodeSockaddr(t *testing.T) {
	fakeZones(t)
	tests := []struct {
		name string
		in   string
		want sockaddr
	}{
		{"ipv4", "169.254.50.1:5555", sockaddrIn(5555, [4]byte{169, 254, 50, 1})},
		{"ipv4 wildcard, port 0", "0.0.0.0:0", sockaddrIn(0, [4]byte{})},
		{"ipv4-mapped ipv6 becomes AF_INET", "[::ffff:10.1.2.3]:4000", sockaddrIn(4000, [4]byte{10, 1, 2, 3})},
		{"ipv6", "[fd53:5250::1]:5555", sockaddrIn6(5555, netip.MustParseAddr("fd53:5250::1").As16(), 0)},
		{"ipv6 wildcard", "[::]:65535", sockaddrIn6(65535, [16]byte{}, 0)},
		{"link-local, zone by name", "[fe80::1%dummy0]:5555", sockaddrIn6(5555, netip.MustParseAddr("fe80::1").As16(), 7)},
		{"link-local, numeric zone", "[fe80::2%12]:1", sockaddrIn6(1, netip.MustParseAddr("fe80::2").As16(), 12)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := encodeSockaddr(netip.MustParseAddrPort(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestEncodeSockaddrErrors(t *testing.T) {
	fakeZones(t)
	_, err := encodeSockaddr(netip.AddrPort{})
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	_, err = encodeSockaddr(netip.MustParseAddrPort("[fe80::1%nosuch0]:1"))
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	require.ErrorContains(t, err, "nosuch0")
}

func TestDecodeSockaddr(t *testing.T) {
	fakeZones(t)
	ib6 := sockaddr{}
	binary.NativeEndian.PutUint16(ib6[0:], afIB)
	mapped := sockaddrIn6(9, netip.MustParseAddr("::ffff:192.0.2.7").As16(), 0)
	tests := []struct {
		name string
		in   []byte
		want netip.AddrPort
	}{
		{"ipv4", func() []byte { s := sockaddrIn(5555, [4]byte{192, 0, 2, 1}); return s[:] }(), netip.MustParseAddrPort("192.0.2.1:5555")},
		{"ipv6", func() []byte { s := sockaddrIn6(80, netip.MustParseAddr("2001:db8::5").As16(), 0); return s[:] }(), netip.MustParseAddrPort("[2001:db8::5]:80")},
		{"scope id becomes the interface name", func() []byte { s := sockaddrIn6(80, netip.MustParseAddr("fe80::5").As16(), 3); return s[:] }(), netip.MustParseAddrPort("[fe80::5%eth1]:80")},
		{"ipv4-mapped is unmapped", mapped[:], netip.MustParseAddrPort("192.0.2.7:9")},
		{"AF_IB is not supported", ib6[:], netip.AddrPort{}},
		{"short ipv6", func() []byte { s := sockaddrIn6(80, [16]byte{1}, 0); return s[:27] }(), netip.AddrPort{}},
		{"short ipv4", func() []byte { s := sockaddrIn(1, [4]byte{1, 2, 3, 4}); return s[:7] }(), netip.AddrPort{}},
		{"empty", nil, netip.AddrPort{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, decodeSockaddr(tt.in))
		})
	}
}

// FuzzSockaddr: decoding never panics, and whatever decodes re-encodes to the same address.
func FuzzSockaddr(f *testing.F) {
	s4 := sockaddrIn(5555, [4]byte{10, 0, 0, 1})
	s6 := sockaddrIn6(5555, netip.MustParseAddr("fe80::1").As16(), 1)
	f.Add(s4[:])
	f.Add(s6[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ap := decodeSockaddr(b)
		if !ap.IsValid() {
			return
		}
		sa, err := encodeSockaddr(ap)
		require.NoError(t, err)
		require.Equal(t, ap, decodeSockaddr(sa[:]))
	})
}

func TestInheritZone(t *testing.T) {
	tests := []struct{ in, zone, want string }{
		{"[fe80::1]:5", "dummy0", "[fe80::1%dummy0]:5"},
		{"[fe80::1%eth0]:5", "dummy0", "[fe80::1%eth0]:5"},
		{"[fd53::1]:5", "dummy0", "[fd53::1]:5"},
		{"10.0.0.1:5", "dummy0", "10.0.0.1:5"},
		{"[fe80::1]:5", "", "[fe80::1]:5"},
	}
	for _, tt := range tests {
		require.Equal(t, netip.MustParseAddrPort(tt.want), inheritZone(netip.MustParseAddrPort(tt.in), tt.zone), tt.in)
	}
}
