// Package cephtest reaches, from tests, the throw-away Ceph cluster that make test-rbd starts
// (integration/ceph/cluster.sh): its ceph.conf and pool, clients, images removed when the test
// ends, and its OSD's process. Without the cluster every test that asks for it is skipped.
// Only tests import it.
package cephtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// The environment cluster.sh sets for the command it runs.
const (
	EnvConf = "SRPT_RBD_CONF" // the cluster's ceph.conf
	EnvPool = "SRPT_RBD_POOL" // a pool where tests may create and remove images
)

// Timeout bounds connecting and each request of the clients made here: the test cluster's one
// OSD, in RAM on a loaded machine, may take seconds.
const Timeout = 10 * time.Second

// Options returns the options of a client of the test cluster (ConfFile, Pool, the timeouts),
// or skips t when there is no cluster.
func Options(t testing.TB) rbd.Options {
	t.Helper()
	conf, pool := os.Getenv(EnvConf), os.Getenv(EnvPool)
	if conf == "" || pool == "" {
		t.Skipf("no Ceph cluster: %s and %s are not set (make test-rbd starts one)", EnvConf, EnvPool)
	}
	return rbd.Options{ConfFile: conf, Pool: pool, MountTimeout: Timeout, OSDOpTimeout: Timeout}
}

// Connect connects a client with o, disconnected when t ends.
func Connect(t testing.TB, o rbd.Options) *rbd.Conn {
	t.Helper()
	conn, err := rbd.Connect(o)
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	return conn
}

var imageSeq atomic.Int64

// Image creates an image of size bytes in the test cluster, named prefix and a number of its
// own, and returns the options that name it. The image is removed when t ends, after the
// cleanups registered later (those of whatever opens it).
func Image(t testing.TB, prefix string, size uint64) rbd.Options {
	t.Helper()
	o := Options(t)
	conn := Connect(t, o)
	o.Image = fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), imageSeq.Add(1))
	require.NoError(t, conn.CreateImage(o.Pool, "", o.Image, size))
	t.Cleanup(func() { require.NoError(t, conn.RemoveImage(o.Pool, "", o.Image)) })
	return o
}

// OSDPID is the process of the cluster's OSD (to stop it with SIGSTOP), from the pid file
// cluster.sh keeps beside ceph.conf.
func OSDPID(t testing.TB, o rbd.Options) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(o.ConfFile), "run", "ceph-osd.0.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}
