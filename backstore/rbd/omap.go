package rbd

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The types of object.go that code without the build tag uses too (the shared reservations'
// protocol and its tests), so that it compiles on hosts without Ceph.

// ErrCompare is the error of an omap read or write whose comparison failed: a key did not hold
// the value the operation expected (ECANCELED from the OSD).
var ErrCompare = errors.New("rados: omap comparison failed")

// OmapWrite is one atomic update of an object's omap: the OSD applies all of it, or none of it
// when a comparison fails.
type OmapWrite struct {
	// Create makes the object if it does not exist (and is no error if it does).
	Create bool
	// Cmp are keys that must hold these values; a missing key holds the empty value.
	Cmp map[string][]byte
	// Set are keys to set, Remove keys to remove.
	Set    map[string][]byte
	Remove []string
}

// Notification is one notify received by a watch, to acknowledge with Object.Ack.
type Notification struct {
	ID, Cookie, Notifier uint64
	Data                 []byte
}

// NotifyAck is one watcher's acknowledgement of a notify: its client's global id, its watch's
// cookie and the payload it acknowledged with.
type NotifyAck struct {
	GID, Cookie uint64
	Payload     []byte
}

// NotifyReply is what a notify learned: who acknowledged, and which watchers did not before
// the timeout.
type NotifyReply struct {
	Acks     []NotifyAck
	Timeouts []NotifyAck // without payload
}

// ParseNotifyReply decodes the reply buffer of rados_notify2: le32 count of acks, each le64
// gid, le64 cookie, le32 length and the payload; then le32 count of timeouts, each le64 gid
// and le64 cookie (librados.h).
func ParseNotifyReply(b []byte) (NotifyReply, error) {
	var r NotifyReply
	bad := func(what string) (NotifyReply, error) {
		return NotifyReply{}, fmt.Errorf("rados: notify reply: %s", what)
	}
	if len(b) == 0 {
		return r, nil
	}
	u32 := func() (uint32, bool) {
		if len(b) < 4 {
			return 0, false
		}
		v := binary.LittleEndian.Uint32(b)
		b = b[4:]
		return v, true
	}
	pair := func() (NotifyAck, bool) {
		if len(b) < 16 {
			return NotifyAck{}, false
		}
		a := NotifyAck{GID: binary.LittleEndian.Uint64(b), Cookie: binary.LittleEndian.Uint64(b[8:])}
		b = b[16:]
		return a, true
	}
	n, ok := u32()
	if !ok || int(n) > len(b)/20 {
		return bad("ack count")
	}
	for range n {
		a, ok := pair()
		if !ok {
			return bad("ack")
		}
		l, ok := u32()
		if !ok || int(l) > len(b) {
			return bad("ack payload")
		}
		a.Payload = append([]byte(nil), b[:l]...)
		b = b[l:]
		r.Acks = append(r.Acks, a)
	}
	n, ok = u32()
	if !ok || int(n) > len(b)/16 {
		return bad("timeout count")
	}
	for range n {
		a, ok := pair()
		if !ok {
			return bad("timeout")
		}
		r.Timeouts = append(r.Timeouts, a)
	}
	if len(b) != 0 {
		return bad("data after the end")
	}
	return r, nil
}
