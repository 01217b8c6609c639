//go:build !rbd

package main

// rbdBuilt: built without the rbd tag, this binary refuses rbd LUNs and links no Ceph
// library (srptarget version says so).
const rbdBuilt = false
