//go:build rbd

package config

// rbdBuilt: with the build tag rbd the daemon links librbd and serves backstore: rbd.
const rbdBuilt = true
