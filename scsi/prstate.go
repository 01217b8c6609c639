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
		f.Registrations = append(f.Registrations, fileReg(r))
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
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	s, err := stateFromFile(&f)
	if err != nil {
		return nil, err
	}
	s.aptpl = true
	s.settle()
	return s, nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields and trailing data.
func decodeStrict(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("persistent reservations: not valid: %w", err)
	}
	if d.More() {
		return errors.New("persistent reservations: not valid: data after the end")
	}
	return nil
}

// stateFromFile checks f and makes the state it describes (not settled).
func stateFromFile(f *prFile) (*prState, error) {
	if f.Version != prFileVersion {
		return nil, fmt.Errorf("persistent reservations: version %d, want %d", f.Version, prFileVersion)
	}
	if f.Type != 0 && !validPRType(f.Type) {
		return nil, fmt.Errorf("persistent reservations: reservation type %d is not one of SPC-4's", f.Type)
	}
	if len(f.Registrations) > maxPRRegistrations {
		return nil, fmt.Errorf("persistent reservations: %d registrations, at most %d", len(f.Registrations), maxPRRegistrations)
	}
	s := &prState{generation: f.Generation, resType: f.Type}
	holders := 0
	seen := make(map[[16]byte][]int, len(f.Registrations))
	for i, fr := range f.Registrations {
		r, err := fr.registration()
		if err != nil {
			return nil, fmt.Errorf("persistent reservations: registration %d: %w", i, err)
		}
		if r.Key == 0 {
			return nil, fmt.Errorf("persistent reservations: registration %d: key %q is not a non-zero 64-bit number", i, fr.Key)
		}
		for _, j := range seen[r.Initiator] {
			if o := &s.regs[j]; o.RelativePort == r.RelativePort || o.AllTargetPorts || r.AllTargetPorts {
				return nil, fmt.Errorf("persistent reservations: registration %d: initiator %s is registered twice", i, fr.Initiator)
			}
		}
		seen[r.Initiator] = append(seen[r.Initiator], len(s.regs))
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
	return s, nil
}

// registration decodes one saved registration (its key may be zero: a unit attention's).
func (fr *prFileReg) registration() (PRRegistration, error) {
	var r PRRegistration
	k, err := strconv.ParseUint(fr.Key, 0, 64)
	if err != nil {
		return r, fmt.Errorf("key %q is not a 64-bit number", fr.Key)
	}
	r.Key = k
	id, err := parseInitiator(fr.Initiator)
	if err != nil {
		return r, err
	}
	r.ITNexusID = ITNexusID{Initiator: id, RelativePort: fr.RelativeTargetPort}
	r.AllTargetPorts, r.Holder = fr.AllTargetPorts, fr.Holder
	return r, nil
}

func parseInitiator(s string) ([16]byte, error) {
	var id [16]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(id) {
		return id, fmt.Errorf("initiator %q is not 32 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}

func fileReg(r PRRegistration) prFileReg {
	return prFileReg{
		Key:                fmt.Sprintf("0x%016x", r.Key),
		Initiator:          hex.EncodeToString(r.Initiator[:]),
		RelativeTargetPort: r.RelativePort,
		AllTargetPorts:     r.AllTargetPorts,
		Holder:             r.Holder,
	}
}

// prShared is the form of a logical unit's reservations in a PRStore: the saved form, with
// what the saved form leaves out because it does not survive a power loss of the one device
// server (APTPL itself, the SPC-2 reservation), and the effects of the last changes for the
// device servers that have yet to apply them.
type prShared struct {
	prFile
	APTPL bool         `json:"aptpl,omitempty"`
	SPC2  *prFileNexus `json:"spc2,omitempty"`
	// ALUA are the asymmetric access states SET TARGET PORT GROUPS set (aluashare.go).
	ALUA   []prFileGroup `json:"alua,omitempty"`
	Events []prFileEvent `json:"events,omitempty"`
}

type prFileNexus struct {
	Initiator          string `json:"initiator"`
	RelativeTargetPort uint16 `json:"relative_target_port"`
}

func fileNexus(id ITNexusID) prFileNexus {
	return prFileNexus{Initiator: hex.EncodeToString(id.Initiator[:]), RelativeTargetPort: id.RelativePort}
}

func (n *prFileNexus) nexus() (ITNexusID, error) {
	id, err := parseInitiator(n.Initiator)
	return ITNexusID{Initiator: id, RelativePort: n.RelativeTargetPort}, err
}

// prFileEvent is a prEvent: unit attentions (a registration and the additional sense code of
// the reason) and aborts.
type prFileEvent struct {
	Version uint64      `json:"version"`
	From    prFileNexus `json:"from"`
	UA      []prFileUA  `json:"ua,omitempty"`
	Abort   []prFileReg `json:"abort,omitempty"`
	// ALUA: an access state changed (ASYMMETRIC ACCESS STATE CHANGED but for From).
	ALUA bool `json:"alua_changed,omitempty"`
}

type prFileUA struct {
	prFileReg
	Reason string `json:"reason"`
}

// prEventReasons are the unit attentions a change of reservations establishes, by the name
// they are stored with.
var prEventReasons = map[string]Reason{
	"RESERVATIONS PREEMPTED":                ReasonReservationsPreempted,
	"RESERVATIONS RELEASED":                 ReasonReservationsReleased,
	"REGISTRATIONS PREEMPTED":               ReasonRegistrationsPreempted,
	"COMMANDS CLEARED BY ANOTHER INITIATOR": ReasonCommandsClearedByAnotherInitiator,
}

// marshalShared serializes s and the effects of the last changes for a PRStore.
func marshalShared(s *prState, events []prEvent) []byte {
	f := prShared{prFile: prFile{Version: prFileVersion, Generation: s.generation, Type: s.resType, Registrations: []prFileReg{}}, APTPL: s.aptpl}
	for _, r := range s.regs {
		f.Registrations = append(f.Registrations, fileReg(r))
	}
	if s.spc2 != nil {
		n := fileNexus(*s.spc2)
		f.SPC2 = &n
	}
	f.ALUA = marshalGroupStates(s.alua)
	for _, e := range events {
		fe := prFileEvent{Version: e.version, From: fileNexus(e.from), ALUA: e.eff.alua}
		for _, u := range e.eff.ua {
			fe.UA = append(fe.UA, prFileUA{fileReg(u.reg), u.reason.String()})
		}
		for _, r := range e.eff.abort {
			fe.Abort = append(fe.Abort, fileReg(r))
		}
		f.Events = append(f.Events, fe)
	}
	b, err := json.Marshal(f)
	if err != nil {
		panic(err) // cannot happen: plain fields
	}
	return b
}

// unmarshalShared decodes what marshalShared made; nil data is the empty state.
func unmarshalShared(data []byte) (*prState, []prEvent, error) {
	if data == nil {
		return &prState{}, nil, nil
	}
	var f prShared
	if err := decodeStrict(data, &f); err != nil {
		return nil, nil, err
	}
	s, err := stateFromFile(&f.prFile)
	if err != nil {
		return nil, nil, err
	}
	s.aptpl = f.APTPL
	if f.SPC2 != nil {
		id, err := f.SPC2.nexus()
		if err != nil {
			return nil, nil, fmt.Errorf("persistent reservations: SPC-2 reservation: %w", err)
		}
		s.spc2 = &id
	}
	if s.alua, err = unmarshalGroupStates(f.ALUA); err != nil {
		return nil, nil, fmt.Errorf("persistent reservations: %w", err)
	}
	if len(f.Events) > prMaxEvents {
		return nil, nil, fmt.Errorf("persistent reservations: %d events, at most %d", len(f.Events), prMaxEvents)
	}
	var events []prEvent
	for i, fe := range f.Events {
		e := prEvent{version: fe.Version, eff: prEffects{alua: fe.ALUA}}
		if i > 0 && e.version != events[i-1].version+1 {
			return nil, nil, fmt.Errorf("persistent reservations: event %d: version %d after %d", i, e.version, events[i-1].version)
		}
		if e.from, err = fe.From.nexus(); err != nil {
			return nil, nil, fmt.Errorf("persistent reservations: event %d: %w", i, err)
		}
		if len(fe.UA) > 2*maxPRRegistrations || len(fe.Abort) > maxPRRegistrations {
			return nil, nil, fmt.Errorf("persistent reservations: event %d: too many effects", i)
		}
		for _, u := range fe.UA {
			reason, ok := prEventReasons[u.Reason]
			r, err := u.registration()
			if !ok || err != nil {
				return nil, nil, fmt.Errorf("persistent reservations: event %d: unit attention %q: %v", i, u.Reason, err)
			}
			e.eff.ua = append(e.eff.ua, prUA{r, reason})
		}
		for _, fr := range fe.Abort {
			r, err := fr.registration()
			if err != nil {
				return nil, nil, fmt.Errorf("persistent reservations: event %d: abort: %w", i, err)
			}
			e.eff.abort = append(e.eff.abort, r)
		}
		events = append(events, e)
	}
	s.settle()
	return s, events, nil
}
