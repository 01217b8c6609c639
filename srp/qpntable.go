package srp

// qpnTable maps the QP numbers of a device to their channels, for the completion dispatch of
// a poll group: every completion of a shared CQ is looked up by its QP number. An open
// addressing table with linear probing (and backward-shift deletion, so no tombstones), kept
// at most half full: a lookup is a multiply, a shift and usually one probe, where Go's map
// hashes the key and walks its groups, which shows per command once a group has more than a
// few channels. QP numbers are 24 bits (IBA 10.2.4; the device allocates them) and never 0
// here: 0 marks a free slot.
type qpnTable struct {
	slots []qpnSlot // a power of two, or empty
	shift uint      // 32 - log2(len(slots))
	n     int
}

type qpnSlot struct {
	qpn uint32
	ch  *channel
}

// slot returns the home slot of qpn (Fibonacci hashing: consecutive QP numbers spread out).
func (t *qpnTable) slot(qpn uint32) int { return int((qpn * 0x9E3779B1) >> t.shift) }

// get returns the channel of qpn, or nil.
func (t *qpnTable) get(qpn uint32) *channel {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.slot(qpn); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.qpn == qpn {
			return s.ch
		}
		if s.qpn == 0 {
			return nil
		}
	}
}

// set makes ch the channel of qpn (qpn != 0, ch != nil).
func (t *qpnTable) set(qpn uint32, ch *channel) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.slot(qpn); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.qpn == qpn {
			s.ch = ch
			return
		}
		if s.qpn == 0 {
			*s = qpnSlot{qpn, ch}
			t.n++
			return
		}
	}
}

// grow doubles the table (16 slots at first) and inserts the entries again.
func (t *qpnTable) grow() {
	old := t.slots
	size := max(16, 2*len(old))
	t.slots = make([]qpnSlot, size)
	t.shift = 32
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	t.n = 0
	for _, s := range old {
		if s.qpn != 0 {
			t.set(s.qpn, s.ch)
		}
	}
}

// remove forgets qpn. The entries after it in its run move back to where a lookup finds
// them (Knuth's algorithm R, TAOCP 6.4).
func (t *qpnTable) remove(qpn uint32) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.slot(qpn)
	for t.slots[i].qpn != qpn {
		if t.slots[i].qpn == 0 {
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].qpn != 0; j = (j + 1) & mask {
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if h := t.slot(t.slots[j].qpn); (j-h)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = qpnSlot{}
	t.n--
}

// each calls f for every channel in the table, as it was before the first call: f may
// change the table (a rare path: the copy is allocated).
func (t *qpnTable) each(f func(*channel)) {
	for _, s := range append([]qpnSlot(nil), t.slots...) {
		if s.qpn != 0 {
			f(s.ch)
		}
	}
}
