//go:build !rbd

package config

// rbdBuilt: without the build tag rbd librbd is not linked in, and serve refuses rbd LUNs
// (validation warns of it).
const rbdBuilt = false
