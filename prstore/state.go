package prstore

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// The shared state itself: its version key and the compare-and-set write that changes it.

func encodeVersion(v uint64) []byte {
	if v == 0 {
		return nil // version 0 is the missing key, which compares as empty
	}
	return fmt.Appendf(nil, "%016x", v)
}

func decodeVersion(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if len(b) != 16 {
		return 0, fmt.Errorf("prstore: version %q is not 16 hex digits", b)
	}
	return strconv.ParseUint(string(b), 16, 64)
}

// Load returns the stored state and its version (scsi.PRStore).
func (s *Store) Load() ([]byte, uint64, error) {
	vals, err := s.obj.ReadOmap([]string{keyVersion, keyState}, nil)
	if err != nil {
		return nil, 0, err
	}
	v, err := decodeVersion(vals[keyVersion])
	if err != nil {
		return nil, 0, err
	}
	data := vals[keyState]
	if v == 0 {
		data = nil
	}
	return data, v, nil
}

// Commit stores data as version old+1 if old is still current (scsi.PRStore).
func (s *Store) Commit(old uint64, data []byte) (bool, error) {
	err := s.obj.WriteOmap(rbd.OmapWrite{
		Cmp: map[string][]byte{keyVersion: encodeVersion(old)},
		Set: map[string][]byte{keyVersion: encodeVersion(old + 1), keyState: data},
	})
	if errors.Is(err, rbd.ErrCompare) {
		return false, nil
	}
	return err == nil, err
}
