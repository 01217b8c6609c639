package rbd

import (
	"errors"
	"time"
)

// Options name an RBD image and say how to reach its cluster. They are the keys of a LUN's rbd
// mapping in the configuration file (config.RBD holds them), and they hold only comparable
// values, so that an open image can be kept across reloads under them. Everything left empty
// keeps librados' own default (which reads $CEPH_CONF or /etc/ceph/ceph.conf only when
// ConfFile is empty and MonHost too); the timeouts are the package's defaults when 0.
type Options struct {
	// Pool is the RADOS pool of the image (DefaultPool when empty).
	Pool string `yaml:"pool"`
	// Namespace is the RADOS namespace inside the pool (optional).
	Namespace string `yaml:"namespace"`
	// Image is the image's name.
	Image string `yaml:"image"`
	// ConfFile is a ceph.conf to read; empty reads the default search path unless MonHost is set.
	ConfFile string `yaml:"ceph_conf"`
	// MonHost lists the monitors ("127.0.0.1" or "[v2:10.0.0.1:3300]"), overriding ConfFile's.
	MonHost string `yaml:"mon_host"`
	// ClientID is the cephx user without "client." ("admin" when empty).
	ClientID string `yaml:"client_id"`
	// Keyring is the path of the client's keyring.
	Keyring string `yaml:"keyring"`
	// MountTimeout bounds connecting to the monitors (DefaultMountTimeout when 0).
	MountTimeout time.Duration `yaml:"rados_mount_timeout"`
	// OSDOpTimeout bounds each request to an OSD and each monitor request
	// (DefaultOSDOpTimeout when 0): a request that an OSD does not answer in time completes
	// with ETIMEDOUT, and a cluster that stops answering turns into LOGICAL UNIT
	// COMMUNICATION TIME-OUT, never a hung command.
	OSDOpTimeout time.Duration `yaml:"rados_osd_op_timeout"`
}

// Defaults of Options. librados waits 300 s to connect and forever for an OSD; the Linux
// initiator gives a command 30 s before it aborts it, so an OSD request must fail before.
const (
	DefaultPool         = "rbd"
	DefaultMountTimeout = 10 * time.Second
	DefaultOSDOpTimeout = 20 * time.Second
)

// WithDefaults returns o with the pool and the timeouts it leaves empty filled in.
func (o Options) WithDefaults() Options {
	if o.Pool == "" {
		o.Pool = DefaultPool
	}
	if o.MountTimeout == 0 {
		o.MountTimeout = DefaultMountTimeout
	}
	if o.OSDOpTimeout == 0 {
		o.OSDOpTimeout = DefaultOSDOpTimeout
	}
	return o
}

// ImageName is pool/[namespace/]image.
func (o Options) ImageName() string {
	if o.Namespace != "" {
		return o.Pool + "/" + o.Namespace + "/" + o.Image
	}
	return o.Pool + "/" + o.Image
}

// Setting is one more librados configuration option, set after those Options make (tests,
// tuning).
type Setting struct{ Name, Value string }

// DefaultDepth is the number of requests an image has in flight at most when OpenImage is
// given 0; more callers wait for a free slot.
const DefaultDepth = 256

// CompareAndWriteMax is the most CompareAndWrite compares at once: librbd's compare-and-write
// works on one 512-byte sector (EINVAL for more, or across a sector boundary).
const CompareAndWriteMax = 512

var (
	// ErrShortRead is returned when librbd read fewer bytes than asked (a read clipped at the
	// end of an image that shrank).
	ErrShortRead = errors.New("rbd: short read")
	// ErrMiscompare is CompareAndWrite's error when the image does not hold cmp.
	ErrMiscompare = errors.New("rbd: compare and write: miscompare")
)
