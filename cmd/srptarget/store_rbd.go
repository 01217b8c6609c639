//go:build rbd

package main

import (
	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
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

// rbdBuilt: this binary serves backstore: rbd (srptarget version says so).
const rbdBuilt = true
