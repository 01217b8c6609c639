package control

import (
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestControlPeerCredentials: the credentials read from a Unix socket are the peer
// process's own, its supplementary groups included.
func TestControlPeerCredentials(t *testing.T) {
	a, b, err := unixPair()
	require.NoError(t, err)
	defer a.Close()
	defer b.Close()
	p, err := peerOf(a)
	require.NoError(t, err)
	require.Equal(t, int32(os.Getpid()), p.pid)
	require.Equal(t, uint32(os.Geteuid()), p.uid)
	require.Equal(t, uint32(os.Getegid()), p.gid)
	groups, err := os.Getgroups()
	require.NoError(t, err)
	for _, g := range groups {
		require.True(t, p.inGroup(g), "supplementary group %d", g)
	}
	_, err = peerOf(&net.TCPConn{})
	require.ErrorContains(t, err, "is not a Unix socket connection")
}

// unixPair is a connected pair of Unix stream sockets.
func unixPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (net.Conn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		return net.FileConn(f)
	}
	a, err := conn(fds[0])
	if err != nil {
		return nil, nil, err
	}
	b, err := conn(fds[1])
	return a, b, err
}

// TestControlCallReadsARefusal: a daemon that refuses a connection answers why and closes it,
// perhaps before the client has written its request; the client prints the reason, not the
// broken pipe of its write.
func TestControlCallReadsARefusal(t *testing.T) {
	client, daemon, err := unixPair()
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, writeResponse(daemon, Response{Version: Version, Error: "permission denied: go away"}))
	require.NoError(t, daemon.Close())
	_, err = Exchange(client, "control.sock", Request{Command: "status"})
	require.EqualError(t, err, "the daemon refused the request: permission denied: go away")
}

// TestLogLevelNeedsWriteAccess: reading the level is a read; changing it needs what a reload
// needs.
func TestLogLevelNeedsWriteAccess(t *testing.T) {
	require.Equal(t, accessRead, needs(Request{Command: "log-level"}))
	require.Equal(t, accessAll, needs(Request{Command: "log-level", Level: "debug"}))
	require.Equal(t, accessAll, needs(Request{Command: "reload", DryRun: true}))
	require.Equal(t, accessRead, needs(Request{Command: "sessions"}))
}
