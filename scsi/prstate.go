package scsi

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// prFileVersion is the version of the saved reservations format.
const prFileVersion = 1

// prFile is the saved form of a logical unit's persistent reservations (APTPL). It is JSON so
// that an operator can read what a cluster left behind; keys are hex strings so that no JSON
// reader rounds them.
type prFile struct {
	Version       int         `json:"version"`
	Generation    uint32      `json:"generation"`
	Type          uint8       `json:"type"`
	Registrations []prFileReg `json:"registrations"`
}

type prFileReg struct {
	Key                string `json:"key"`
	Initiator          string `json:"initiator"`
	RelativeTargetPort uint16 `json:"relative_target_port"`
	AllTargetPorts     bool   `json:"all_target_ports,omitempty"`
	Holder             bool   `json:"holder,omitempty"`
}

// marshalPRState serializes the persistent part of s (not the SPC-2 reservation).
func marshalPRState(s *prState) []byte {
	f := prFile{Version: prFileVersion, Generation: s.generation, Type: s.resType, Registrations: []prFileReg{}}
	for _, r := range s.regs {
		f.Registrations = append(f.Registrations, prFileReg{
			Key:                fmt.Sprintf("0x%016x", r.Key),
			Initiator:          hex.EncodeToString(r.Initiator[:]),
			RelativeTargetPort: r.RelativePort,
			AllTargetPorts:     r.AllTargetPorts,
			Holder:             r.Holder,
		})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		panic(err) // cannot happen: plain fields
	}
	return append(b, '\n')
}

// unmarshalPRState decodes and checks saved reservations. Anything unexpected is an error:
// dropping registrations silently would let a fenced node back onto shared storage.
func unmarshalPRState(data []byte) (*prState, error) {
	var f prFile
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("persistent reservations: not valid: %w", err)
	}
	if d.More() {
		return nil, errors.New("persistent reservations: not valid: data after the end")
	}
	if f.Version != prFileVersion {
		return nil, fmt.Errorf("persistent reservations: version %d, want %d", f.Version, prFileVersion)
	}
	if f.Type != 0 && !validPRType(f.Type) {
		return nil, fmt.Errorf("persistent reservations: reservation type %d is not one of SPC-4's", f.Type)
	}
	if len(f.Registrations) > maxPRRegistrations {
		return nil, fmt.Errorf("persistent reservations: %d registrations, at most %d", len(f.Registrations), maxPRRegistrations)
	}
	s := &prState{generation: f.Generation, resType: f.Type, aptpl: true}
	holders := 0
	for i, fr := range f.Registrations {
		var r PRRegistration
		k, err := strconv.ParseUint(fr.Key, 0, 64)
		if err != nil || k == 0 {
			return nil, fmt.Errorf("persistent reservations: registration %d: key %q is not a non-zero 64-bit number", i, fr.Key)
		}
		r.Key = k
		ini, err := hex.DecodeString(fr.Initiator)
		if err != nil || len(ini) != len(r.Initiator) {
			return nil, fmt.Errorf("persistent reservations: registration %d: initiator %q is not 32 hex digits", i, fr.Initiator)
		}
		copy(r.Initiator[:], ini)
		r.RelativePort, r.AllTargetPorts, r.Holder = fr.RelativeTargetPort, fr.AllTargetPorts, fr.Holder
		for j := range s.regs {
			if s.regs[j].Initiator == r.Initiator && (s.regs[j].RelativePort == r.RelativePort || s.regs[j].AllTargetPorts || r.AllTargetPorts) {
				return nil, fmt.Errorf("persistent reservations: registration %d: initiator %s is registered twice", i, fr.Initiator)
			}
		}
		if r.Holder {
			holders++
		}
		s.regs = append(s.regs, r)
	}
	switch {
	case f.Type == 0 && holders > 0:
		return nil, errors.New("persistent reservations: a registration holds a reservation, but there is none")
	case f.Type != 0 && prAllRegistrants(f.Type) && (holders > 0 || len(s.regs) == 0):
		return nil, fmt.Errorf("persistent reservations: an all registrants reservation (type %d) needs registrations and no single holder", f.Type)
	case f.Type != 0 && !prAllRegistrants(f.Type) && holders != 1:
		return nil, fmt.Errorf("persistent reservations: a reservation of type %d needs exactly one holder, not %d", f.Type, holders)
	}
	s.settle()
	return s, nil
}
