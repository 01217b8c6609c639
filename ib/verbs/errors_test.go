package verbs

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

func TestPostError(t *testing.T) {
	tests := []struct {
		errno syscall.Errno
		want  error // nil: passed through unchanged
	}{
		{errnoENOMEM, ib.ErrQueueFull},
		{errnoEINVAL, ib.ErrInvalidArgument},
		{errnoEIO, ib.ErrDeviceRemoved},
		{errnoENODEV, ib.ErrDeviceRemoved},
		{errnoENXIO, ib.ErrDeviceRemoved},
		{errnoEAGAIN, nil},
	}
	for _, tt := range tests {
		t.Run(tt.errno.Error(), func(t *testing.T) {
			err := postError(tt.errno)
			require.ErrorIs(t, err, tt.errno, "the errno stays in the chain")
			if tt.want == nil {
				require.Equal(t, error(tt.errno), err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestSetupError(t *testing.T) {
	for _, e := range []syscall.Errno{errnoENODEV, errnoENOSYS, errnoENOENT, errnoENXIO} {
		err := setupError(e)
		require.ErrorIs(t, err, ErrNoDevice, "%v", e)
		require.ErrorIs(t, err, e)
	}
	require.ErrorIs(t, setupError(errnoEINVAL), ib.ErrInvalidArgument)
	require.Equal(t, error(errnoENODATA), setupError(errnoENODATA))
}

func TestBindError(t *testing.T) {
	require.ErrorIs(t, bindError(errnoEADDRNOTAVAIL), ErrNoDevice)
	require.ErrorIs(t, bindError(errnoENODEV), ErrNoDevice)
	require.Equal(t, error(syscall.Errno(98)), bindError(syscall.Errno(98)), "EADDRINUSE passes through")
}

func TestCMStatusError(t *testing.T) {
	require.Equal(t, error(syscall.Errno(110)), cmStatusError(-110), "ETIMEDOUT from UNREACHABLE")
	require.ErrorIs(t, cmStatusError(-19), ErrNoDevice, "ENODEV from ADDR_ERROR")
	require.Equal(t, error(errnoEIO), cmStatusError(0), "a failure event without a status")
	require.Equal(t, error(syscall.Errno(28)), cmStatusError(28))
}

func TestRejectedError(t *testing.T) {
	err := error(&RejectedError{Reason: RejectConsumerDefined, PrivateData: make([]byte, 148)})
	require.EqualError(t, err, "verbs: connection rejected, reason 28, 148 bytes of private data")
	var rej *RejectedError
	require.True(t, errors.As(errorf("connect: %w", err), &rej))
	require.Equal(t, 28, rej.Reason)
}

func TestBindIBError(t *testing.T) {
	err := bindIBError(syscall.Errno(93), 0x0002c90300a0b0c1)
	require.ErrorIs(t, err, ErrServiceID)
	require.ErrorIs(t, err, syscall.Errno(93))
	require.Contains(t, err.Error(), "0x0002c90300a0b0c1 is not of the form 0x00000000013fPPPP")
	err = bindIBError(syscall.Errno(19), 0x13f15b3)
	require.ErrorIs(t, err, ErrNoDevice)
	require.ErrorIs(t, err, syscall.Errno(19))
	require.Contains(t, err.Error(), "no InfiniBand port has this GID")
	for _, e := range []syscall.Errno{98, 99} {
		err := bindIBError(e, 0x13f15b3)
		require.NotErrorIs(t, err, ErrNoDevice)
		require.ErrorIs(t, err, e)
		require.Contains(t, err.Error(), "service ID 0x00000000013f15b3 is bound already")
	}
	err = bindIBError(syscall.Errno(13), 0x13f0064)
	require.ErrorIs(t, err, syscall.Errno(13))
	require.Contains(t, err.Error(), "CAP_NET_BIND_SERVICE")
	require.Equal(t, syscall.Errno(1), bindIBError(syscall.Errno(1), 0x13f15b3))
}

func TestCheckIBPort(t *testing.T) {
	roce := DeviceInfo{Name: "rxe0", Ports: []PortInfo{{Num: 1, LinkLayer: LinkLayerEthernet}}}
	hca := DeviceInfo{Name: "mlx5_0", Ports: []PortInfo{{Num: 1, LinkLayer: LinkLayerEthernet}, {Num: 2, LinkLayer: LinkLayerInfiniBand}}}
	require.NoError(t, checkIBPort([]DeviceInfo{roce, hca}, nil))
	err := checkIBPort([]DeviceInfo{roce}, nil)
	require.ErrorIs(t, err, ErrNoIBPort)
	require.Contains(t, err.Error(), "rxe0 port 1 is Ethernet;")
	require.ErrorIs(t, checkIBPort(nil, nil), ErrNoDevice)
	e := errors.New("list failed")
	require.Equal(t, e, checkIBPort(nil, e))
}
