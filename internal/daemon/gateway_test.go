package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/config"
)

// TestLUNIdentityAcrossGateways: two daemons in front of one image (two target identities)
// present one logical unit only when the LUN's serial is configured: the NAA designator, and
// so the WWID dm-multipath groups paths by, is made from the serial, whose default includes
// the daemon's id_ext. The default of a configuration without serial must not change.
func TestLUNIdentityAcrossGateways(t *testing.T) {
	a := Identity{idExt: 0x5e2e00000000b001, iocGUID: 0x5e2e00000000b001}
	b := Identity{idExt: 0x5e2e00000000b002, iocGUID: 0x5e2e00000000b002}
	mem, err := backstore.NewMemory(1<<20, 512)
	require.NoError(t, err)
	s := &sharedStore{guardedStore: guardedStore{Backstore: mem}}
	lun := 3
	for _, tc := range []struct {
		name         string
		serial       string
		wantA, wantB string
	}{
		{"default: from id_ext and the LUN, one per daemon", "", "5e2e00000000b0010003", "5e2e00000000b0020003"},
		{"configured: the same in both", "5e2e000000006001", "5e2e000000006001", "5e2e000000006001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &config.LUN{LUN: &lun, Serial: tc.serial}
			ka := (&daemon{ident: a}).luKeyOf(&config.Config{}, l, s)
			kb := (&daemon{ident: b}).luKeyOf(&config.Config{}, l, s)
			require.Equal(t, tc.wantA, ka.serial)
			require.Equal(t, tc.wantB, kb.serial)
			require.Equal(t, tc.wantA == tc.wantB, ka == kb, "the logical unit keys: %+v, %+v", ka, kb)
		})
	}
}
