package ib

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestSlab(t *testing.T) {
	page := os.Getpagesize()
	for _, tt := range []struct {
		size, want int
	}{
		{1, page},
		{page, page},
		{page + 1, 2 * page},
		{10 * page, 10 * page},
	} {
		s, err := NewSlab(tt.size)
		require.NoError(t, err)
		b := s.Bytes()
		require.Len(t, b, tt.want)
		require.Zero(t, uintptr(unsafe.Pointer(&b[0]))%uintptr(page), "page aligned for O_DIRECT")
		b[0], b[len(b)-1] = 1, 2 // writable end to end
		require.NoError(t, s.Close())
		require.Nil(t, s.Bytes())
		require.NoError(t, s.Close(), "second Close is a no-op")
	}
	for _, size := range []int{0, -1} {
		_, err := NewSlab(size)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
}

func TestStrings(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{StatusSuccess.String(), "success"},
		{StatusWRFlushError.String(), "work request flushed error"},
		{StatusRemoteAccessError.String(), "remote access error"},
		{StatusRNRRetryExceeded.String(), "RNR retry counter exceeded"},
		{StatusTransportRetryExceeded.String(), "transport retry counter exceeded"},
		{StatusGeneralError.String(), "general error"},
		{Status(22).String(), "status(22)"},
		{OpRDMAWrite.String(), "RDMA_WRITE"},
		{OpRecv.String(), "RECV"},
		{Opcode(0).String(), "opcode(0)"},
		{EventDisconnected.String(), "disconnected"},
		{Event(9).String(), "event(9)"},
	} {
		require.Equal(t, tt.want, tt.got)
	}
}
