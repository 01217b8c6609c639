package prstore

import (
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// RADOS is the Object of a RADOS object.
func RADOS(o *rbd.Object) Object { return radosObject{o} }

type radosObject struct{ *rbd.Object }

func (r radosObject) Watch(timeout time.Duration, onNotify func(rbd.Notification), onError func(error)) (Watch, error) {
	w, err := r.Object.Watch(timeout, onNotify, onError)
	if err != nil {
		return nil, err
	}
	return w, nil
}
