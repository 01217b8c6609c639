package scsi

import (
	"sync"
	"sync/atomic"
)

// modeState holds the current values of the changeable mode parameters. The defaults come from
// the configuration; MODE SELECT changes the current values and they take effect at once; a
// LOGICAL UNIT RESET returns them to the defaults. Saved values are not supported (SP=1 is
// refused with SAVING PARAMETERS NOT SUPPORTED), so the saved page equals the default page.
//
// The bits read on every I/O are atomics so that the data path takes no lock.
type modeState struct {
	mu sync.Mutex // serialises MODE SELECT

	defaults modeValues

	wce    atomic.Bool   // caching page: write cache enable
	rcd    atomic.Bool   // caching page: read cache disable
	dSense atomic.Bool   // control page: descriptor format sense data
	qam    atomic.Uint32 // control page: queue algorithm modifier (0 restricted, 1 unrestricted)
}

// modeValues is one set of changeable mode parameter values.
type modeValues struct {
	wce, rcd, dSense bool
	qam              uint8
}

func (m *modeState) init(cfg Config) {
	// QUEUE ALGORITHM MODIFIER 1 (unrestricted reordering) is what the task set does: SIMPLE
	// commands run concurrently, in any order. It is not changeable, since restricted
	// reordering is not implemented.
	m.defaults = modeValues{wce: cfg.WriteCache, qam: 1}
	m.reset()
}

// reset restores the default values.
func (m *modeState) reset() {
	m.set(m.defaults)
}

// current returns the current values.
func (m *modeState) current() modeValues {
	return modeValues{wce: m.wce.Load(), rcd: m.rcd.Load(), dSense: m.dSense.Load(), qam: uint8(m.qam.Load())}
}

// set makes v the current values.
func (m *modeState) set(v modeValues) {
	m.wce.Store(v.wce)
	m.rcd.Store(v.rcd)
	m.dSense.Store(v.dSense)
	m.qam.Store(uint32(v.qam))
}
