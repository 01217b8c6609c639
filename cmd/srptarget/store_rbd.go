//go:build rbd

package main

import "github.com/srptarget/srptarget/backstore"

// With the build tag rbd the daemon links librbd and serves backstore: rbd.
func init() {
	openRBD = func(r *RBDConfig, blockSize uint32, readOnly bool) (backstore.Backstore, error) {
		return backstore.OpenRBD(backstore.RBDOptions{
			Pool: r.Pool, Namespace: r.Namespace, Image: r.Image,
			ConfFile: r.CephConf, MonHost: r.MonHost, ClientID: r.ClientID, Keyring: r.Keyring,
			MountTimeout: r.mountTimeout, OSDOpTimeout: r.osdOpTimeout,
			ReadOnly: readOnly, LogicalBlockSize: blockSize,
		})
	}
}
