package daemon

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/prstore"
	"github.com/srptarget/srptarget/scsi"
)

// openRBD opens an RBD image (a variable, so that tests can put a cluster that never
// answers in its place).
var openRBD = func(r *config.RBD, blockSize uint32, readOnly bool) (backstore.Backstore, error) {
	if !rbdBuilt {
		return nil, errNoRBD
	}
	return backstore.OpenRBD(r.Options, blockSize, readOnly)
}

// openSharedPR opens the persistent reservations that every gateway of the image shares, in a
// RADOS object beside it; close ends this gateway's membership.
func openSharedPR(b backstore.Backstore, r *config.RBD, member string, log *zap.Logger) (*scsi.Reservations, func() error, error) {
	img, ok := b.(*backstore.RBD)
	if !ok {
		return nil, nil, errors.New("shared reservations need an rbd backstore")
	}
	oid := prObjectName(r.Image)
	obj, err := img.Conn().OpenObject(r.Pool, r.Namespace, oid)
	if err != nil {
		return nil, nil, err
	}
	st, err := prstore.Open(prstore.RADOS(obj), prstore.Options{Member: member, Lease: time.Duration(r.PRLease), Drain: r.OSDOpTimeout,
		Log: log.With(zap.String("object", obj.Name()))})
	if err != nil {
		obj.Close()
		return nil, nil, fmt.Errorf("persistent reservations in %s: %w", obj.Name(), err)
	}
	res, err := scsi.NewSharedReservations(st)
	if err != nil {
		_ = st.Close()
		obj.Close()
		return nil, nil, fmt.Errorf("%s: %w", obj.Name(), err)
	}
	st.Attach(res)
	addrs, _ := img.Conn().Addrs()
	log.Info("persistent reservations shared with the other gateways of the image", zap.String("object", obj.Name()),
		zap.String("member", member), zap.String("client", addrs), zap.Uint64("version", res.Version()), zap.Bool("current", res.Fresh()))
	return res, func() error {
		err := st.Close()
		obj.Close()
		return err
	}, nil
}

// rbdBuilt: this binary serves backstore: rbd, linked against librbd and librados (srptarget
// version says so); without, it refuses rbd LUNs and links no Ceph library.
const rbdBuilt = rbd.Built
