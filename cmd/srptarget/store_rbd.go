//go:build rbd

package main

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/prstore"
	"github.com/srptarget/srptarget/scsi"
)

// With the build tag rbd the daemon links librbd and serves backstore: rbd.
func init() {
	openRBD = func(r *config.RBD, blockSize uint32, readOnly bool) (backstore.Backstore, error) {
		mount, osdOp := r.Timeouts()
		return backstore.OpenRBD(backstore.RBDOptions{
			Pool: r.Pool, Namespace: r.Namespace, Image: r.Image,
			ConfFile: r.CephConf, MonHost: r.MonHost, ClientID: r.ClientID, Keyring: r.Keyring,
			MountTimeout: mount, OSDOpTimeout: osdOp,
			ReadOnly: readOnly, LogicalBlockSize: blockSize,
		})
	}
}

func init() {
	openSharedPR = func(b backstore.Backstore, r *config.RBD, member string, log *zap.Logger) (*scsi.Reservations, func() error, error) {
		img, ok := b.(*backstore.RBD)
		if !ok {
			return nil, nil, errors.New("shared reservations need an rbd backstore")
		}
		oid := prObjectName(r.Image)
		obj, err := img.Conn().OpenObject(r.Pool, r.Namespace, oid)
		if err != nil {
			return nil, nil, err
		}
		_, osdOp := r.Timeouts()
		st, err := prstore.Open(prstore.RADOS(obj), prstore.Options{Member: member, Lease: r.Lease(), Drain: osdOp,
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
}

// rbdBuilt: this binary serves backstore: rbd (srptarget version says so).
const rbdBuilt = true
