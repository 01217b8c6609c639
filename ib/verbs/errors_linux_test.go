//go:build linux

package verbs

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The mappings spell Linux's errno numbers out (the file builds everywhere); check them.
func TestErrnoValues(t *testing.T) {
	require.Equal(t, syscall.ENOENT, errnoENOENT)
	require.Equal(t, syscall.EIO, errnoEIO)
	require.Equal(t, syscall.ENXIO, errnoENXIO)
	require.Equal(t, syscall.EAGAIN, errnoEAGAIN)
	require.Equal(t, syscall.ENOMEM, errnoENOMEM)
	require.Equal(t, syscall.ENODEV, errnoENODEV)
	require.Equal(t, syscall.EINVAL, errnoEINVAL)
	require.Equal(t, syscall.ENOSYS, errnoENOSYS)
	require.Equal(t, syscall.ENODATA, errnoENODATA)
	require.Equal(t, syscall.EADDRNOTAVAIL, errnoEADDRNOTAVAIL)
	require.Equal(t, syscall.AF_INET, afInet)
	require.Equal(t, syscall.AF_INET6, afInet6)
}
