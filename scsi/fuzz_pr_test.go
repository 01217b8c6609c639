package scsi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzLoadReservations feeds arbitrary saved state to LoadReservations: it must refuse it or
// give a state that saves back to data it loads identically.
func FuzzLoadReservations(f *testing.F) {
	f.Add([]byte(`{"version":1,"generation":3,"type":5,"registrations":[{"key":"0xa","initiator":"000000000000000000000000000000a1","relative_target_port":1,"holder":true}]}`))
	f.Add([]byte(`{"version":1,"generation":0,"type":0,"registrations":[]}`))
	f.Add([]byte(`{"version":1,"type":8,"registrations":[{"key":"0x1","initiator":"000000000000000000000000000000a1","relative_target_port":1,"all_target_ports":true}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := LoadReservations(data, nil)
		if err != nil {
			return
		}
		s := r.state.Load()
		again, err := LoadReservations(marshalPRState(s), nil)
		require.NoError(t, err)
		require.Equal(t, s, again.state.Load())
	})
}

// FuzzPersistentReserveOut sends arbitrary PERSISTENT RESERVE OUT commands from three nexuses:
// nothing may panic, each is answered within prOutTimeBound, and the state must always be one
// that saves and loads back.
func FuzzPersistentReserveOut(f *testing.F) {
	f.Add(byte(0), byte(0), byte(0), prParams(0, keyA, 0))
	f.Add(byte(1), byte(1), byte(5), prParams(keyA, 0, 0))
	f.Add(byte(2), byte(4), byte(3), prParams(keyB, keyA, 0))
	f.Add(byte(0), byte(7), byte(0), cat(prParams(keyA, keyC, 0)[:20], []byte{0, 0, 0, 24}, srpTID(prInitiator(0xC3))))
	f.Add(byte(2), byte(0), byte(0), cat(prParams(0, keyC, 0x0C), []byte{0, 0, 0, 24}, srpTID(prInitiator(0xD4))))
	f.Fuzz(func(t *testing.T, from, sa, typ byte, params []byte) {
		lu := newTestLU(t, 16, 512, func(cfg *Config) {
			cfg.Reservations = NewReservations(func([]byte) error { return nil })
		})
		m := newTestMap(t, lu)
		nexuses := []*Nexus{prNexusA, prNexusB, prNexusC}
		for _, n := range nexuses {
			clearPowerOnUA(t, m, n)
		}
		sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0))
		sendPROut(m, prNexusB, prOutRegister, 0, prParams(0, keyB, 0))
		sendPROut(m, prNexusA, prOutReserve, PRTypeWriteExclusive, prParams(keyA, 0, 0))
		start := time.Now()
		c := run(m, nexuses[int(from)%3], 0, prOutCDB(sa&0x1F, typ, uint32(len(params))), params, 0)
		require.Less(t, time.Since(start), prOutTimeBound)
		require.Contains(t, []Status{StatusGood, StatusCheckCondition, StatusReservationConflict}, c.Status)
		s := lu.pr.state.Load()
		if len(s.regs) > 0 || s.resType != 0 {
			_, err := LoadReservations(marshalPRState(s), nil)
			require.NoError(t, err, "state % +v", s)
		}
		for _, n := range nexuses {
			run(m, n, 0, prInCDB(3, 4096), nil, 4096)
		}
	})
}

// FuzzSpecIPTList sends REGISTER with SPEC_I_PT from C (A and B registered) with lists of any
// length up to an 8 MiB parameter list, with or without a duplicate and ALL_TG_PT: the answer
// must be the model's, and come within prOutTimeBound however long the list.
func FuzzSpecIPTList(f *testing.F) {
	f.Add(uint32(1), uint32(0), byte(0))
	f.Add(uint32(253), uint32(0), byte(0))
	f.Add(uint32(254), uint32(0), byte(prOutAllTgPt))
	f.Add(uint32(100), uint32(99), byte(0))
	f.Add(uint32((maxDataOut-28)/24), uint32(7), byte(0))
	f.Add(uint32((maxDataOut-28)/24), uint32(0), byte(prOutAllTgPt))
	f.Fuzz(func(t *testing.T, count, dup uint32, flags byte) {
		n := int(count % ((maxDataOut-28)/24 + 1))
		d := int(dup)
		if d >= n {
			d = -1
		}
		_, m := prMap(t, 0, nil)
		p := specIPTParams(keyC, flags&prOutAllTgPt, n, d)
		c := timedPROut(t, m, prNexusC, prOutRegister, 0, p)
		_, keys := allKeys(t, m)
		switch {
		case 2+1+n > maxPRRegistrations:
			requireSense(t, c, ReasonInsufficientRegistrationResources)
			require.Len(t, keys, 2)
		case d > 0:
			requireField(t, c, ReasonInvalidFieldInParameterList, false, prOutSpecIPTHeaderLength+d*srpTransportIDLength, -1)
			require.Len(t, keys, 2)
		default:
			requireGood(t, c)
			require.Len(t, keys, 2+1+n)
		}
	})
}

// FuzzUnmarshalShared feeds arbitrary shared state to the decoder that reads what another
// device server stored: it must refuse it or give a state and events that encode back to data
// it decodes identically.
func FuzzUnmarshalShared(f *testing.F) {
	s := &prState{generation: 4, resType: PRTypeWriteExclusive, aptpl: true, spc2: &ITNexusID{RelativePort: 2},
		regs: []PRRegistration{{Key: 0xA, ITNexusID: ITNexusID{Initiator: prInitiator(0xA1), RelativePort: 1}, Holder: true}}}
	events := []prEvent{{version: 3, from: ITNexusID{RelativePort: 1}, eff: prEffects{
		ua:    []prUA{{PRRegistration{Key: 0xB, ITNexusID: ITNexusID{Initiator: prInitiator(0xB2), RelativePort: 2}}, ReasonRegistrationsPreempted}},
		abort: []PRRegistration{{Key: 0xB, ITNexusID: ITNexusID{Initiator: prInitiator(0xB2), RelativePort: 2}}}}}}
	f.Add(marshalShared(s, events))
	f.Add(marshalShared(&prState{}, nil))
	f.Add(marshalShared(&prState{alua: []groupState{{1, Standby}, {2, ActiveOptimized}}},
		[]prEvent{{version: 7, from: ITNexusID{RelativePort: 1}, eff: prEffects{alua: true}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, events, err := unmarshalShared(data)
		if err != nil {
			return
		}
		s2, events2, err := unmarshalShared(marshalShared(s, events))
		require.NoError(t, err)
		require.Equal(t, s, s2)
		require.Equal(t, events, events2)
	})
}
