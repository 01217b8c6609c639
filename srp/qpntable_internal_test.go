package srp

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQPNTable checks the table against a map through random sets and removals, with QP
// numbers dense (as a device allocates them) and sparse (24 bits), so that runs wrap around
// the end of the table and removals shift entries back across it.
func TestQPNTable(t *testing.T) {
	tests := []struct {
		name  string
		space uint32
		ops   int
	}{
		{"dense", 300, 20000},
		{"sparse", 1 << 24, 20000},
		{"few", 5, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.space)))
			chans := make([]channel, 64)
			var tab qpnTable
			want := map[uint32]*channel{}
			for op := range tt.ops {
				qpn := 1 + rng.Uint32N(tt.space)
				switch rng.IntN(3) {
				case 0, 1:
					ch := &chans[rng.IntN(len(chans))]
					tab.set(qpn, ch)
					want[qpn] = ch
				case 2:
					tab.remove(qpn)
					delete(want, qpn)
				}
				require.Equal(t, len(want), tab.n, "op %d", op)
				require.LessOrEqual(t, 2*tab.n, len(tab.slots), "op %d: more than half full", op)
				probe := 1 + rng.Uint32N(tt.space)
				require.Same(t, want[probe], tab.get(probe), "op %d: qpn %d", op, probe)
			}
			for qpn, ch := range want {
				require.Same(t, ch, tab.get(qpn), "qpn %d", qpn)
			}
			seen := map[*channel]int{}
			tab.each(func(ch *channel) { seen[ch]++ })
			wantSeen := map[*channel]int{}
			for _, ch := range want {
				wantSeen[ch]++
			}
			require.Equal(t, wantSeen, seen)
			for qpn := range want {
				tab.remove(qpn)
				require.Nil(t, tab.get(qpn))
			}
			require.Zero(t, tab.n)
		})
	}
}

// TestQPNTableEmpty: lookups and removals on a table never set, and QP number 0, find nothing.
func TestQPNTableEmpty(t *testing.T) {
	var tab qpnTable
	require.Nil(t, tab.get(7))
	tab.remove(7)
	tab.set(7, &channel{})
	require.Nil(t, tab.get(0))
	require.Nil(t, tab.get(8))
	tab.remove(8)
	require.Equal(t, 1, tab.n)
}
