package srptest

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// CDB layouts from SBC-3 / SPC-4, written out by hand.
func TestCDBs(t *testing.T) {
	for name, tc := range map[string]struct{ got, want []byte }{
		"TEST UNIT READY":   {CDBTestUnitReady(), []byte{0, 0, 0, 0, 0, 0}},
		"INQUIRY standard":  {CDBInquiry(false, 0, 96), []byte{0x12, 0, 0, 0, 96, 0}},
		"INQUIRY VPD 0x83":  {CDBInquiry(true, 0x83, 0x200), []byte{0x12, 0x01, 0x83, 0x02, 0x00, 0}},
		"READ(10)":          {CDBRead10(0x01020304, 0x0506), []byte{0x28, 0, 1, 2, 3, 4, 0, 5, 6, 0}},
		"WRITE(10)":         {CDBWrite10(7, 1), []byte{0x2a, 0, 0, 0, 0, 7, 0, 0, 1, 0}},
		"READ(16)":          {CDBRead16(0x0102030405060708, 0x090a0b0c), []byte{0x88, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0}},
		"WRITE(16)":         {CDBWrite16(1, 2), []byte{0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0}},
		"READ CAPACITY(16)": {CDBReadCapacity16(32), []byte{0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}},
	} {
		require.Equal(t, tc.want, tc.got, name)
	}
}

func TestSenseKey(t *testing.T) {
	for name, tc := range map[string]struct {
		sense          []byte
		key, asc, ascq uint8
		ok             bool
	}{
		"fixed":             {senseFixed(0x05, 0x24, 0x01), 0x05, 0x24, 0x01, true},
		"fixed, deferred":   {append([]byte{0x71}, senseFixed(0x03, 0x11, 0x00)[1:]...), 0x03, 0x11, 0x00, true},
		"descriptor":        {[]byte{0x72, 0x06, 0x29, 0x07, 0, 0, 0, 0}, 0x06, 0x29, 0x07, true},
		"fixed, too short":  {senseFixed(0x05, 0x24, 0)[:13], 0, 0, 0, false},
		"descriptor, short": {[]byte{0x72, 0x06, 0x29}, 0, 0, 0, false},
		"unknown format":    {[]byte{0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, false},
		"none":              {nil, 0, 0, 0, false},
	} {
		key, asc, ascq, ok := senseKey(tc.sense)
		require.Equal(t, [4]any{tc.key, tc.asc, tc.ascq, tc.ok}, [4]any{key, asc, ascq, ok}, name)
	}
	require.NoError(t, (&Response{}).Err())
	require.EqualError(t, (&Response{Status: 0x08}).Err(), "srptest: SCSI status 0x08")
	require.EqualError(t, (&Response{Status: 0x02, Sense: senseFixed(0x05, 0x24, 0)}).Err(),
		"srptest: SCSI status 0x02, sense key 0x5, ASC/ASCQ 0x24/0x00")
}

func TestLoginRejectedErrorText(t *testing.T) {
	rej := make([]byte, 148)
	iu.LoginRej(rej).Encode(&iu.LoginRejFields{Reason: iu.LoginRejReqITIULengthTooLarge})
	e := newLoginRejected(&memfabric.RejectedError{Reason: memfabric.RejectConsumerDefined, PrivateData: rej})
	require.True(t, e.Decoded)
	require.Equal(t, iu.LoginRejReqITIULengthTooLarge, e.Reason)
	require.Equal(t, "srptest: login rejected: "+iu.LoginRejReqITIULengthTooLarge.String(), e.Error())
	e = newLoginRejected(&memfabric.RejectedError{Reason: memfabric.RejectConsumerDefined, PrivateData: []byte{0xc0}})
	require.False(t, e.Decoded)
	require.Contains(t, e.Error(), "1 bytes of private data that are no SRP_LOGIN_REJ")
	e = newLoginRejected(&memfabric.RejectedError{Reason: memfabric.RejectInvalidServiceID})
	require.Equal(t, "srptest: login rejected by the connection manager, reason 8", e.Error())
}

func TestInitiatorNode(t *testing.T) {
	fab := memfabric.New(memfabric.Options{})
	defer fab.Close()
	cfg := Config{Source: netip.MustParseAddr("203.0.113.7")}
	n, err := cfg.node(fab)
	require.NoError(t, err)
	require.Equal(t, cfg.Source, n.Addr())
	_, err = cfg.node(fab)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "a taken source address is an error: reuse the node")
	cfg.Node = n
	got, err := cfg.node(fab)
	require.NoError(t, err)
	require.Same(t, n, got)
	// Automatic addresses skip taken ones.
	a, err := (&Config{}).node(fab)
	require.NoError(t, err)
	b, err := (&Config{}).node(fab)
	require.NoError(t, err)
	require.NotEqual(t, a.Addr(), b.Addr())
	require.True(t, netip.MustParsePrefix("198.18.0.0/15").Contains(a.Addr()))
	_, err = (&Config{}).node(nil)
	require.ErrorIs(t, err, ErrConfig)
}
