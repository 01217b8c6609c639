package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSummary: what validate prints for a valid file, every setting with its default, the
// identity, the ACLs and the warnings with their lines.
func TestSummary(t *testing.T) {
	file := filepath.Join(t.TempDir(), "good.yaml")
	require.NoError(t, os.WriteFile(file, []byte(goodConfig+`  - initiators: ["0x4e49c9ffff0a0b0c*"]
    luns: [1]
`), 0o600))
	cfg, err := Load(file)
	require.NoError(t, err)
	out := cfg.Summary()
	require.Equal(t, file+`: OK
target: id_ext=0002c90300a0b0c1 ioc_guid=0002c90300a0b0c1
listeners (2):
  0.0.0.0:5555
  [fe80::1%eth0]:5555
limits: max_it_iu_len 8276, credits 64, max_channels 16, max_transfer_size 4MiB,
        send_queue_depth 4096, buffer_pool_size 64MiB, immediate_data true, poll_window 2ms,
        rdma_timeout 30s, max_initiator_buffer 16MiB (25%), max_sessions 256,
        max_channels_total 512, max_sessions_per_source 64, max_channels_per_source 128,
        idle_timeout off, max_logins_in_progress 32, srq_depth 512, backstore_io auto
LUNs (2):
  LUN 0: memory, 1GiB, 512-byte blocks
  LUN 1: null, 64MiB, 4096-byte blocks, vendor "LIO-ORG", write cache off
ACLs (3):
  acls[0]: initiators * -> LUNs 0
  acls[1]: sources 10.0.0.0/8, 192.168.1.7 -> LUNs 0, 1, read-only
  acls[2]: initiators 0x4e49c9ffff0a0b0c* -> LUNs 1
warning: `+file+`:26: acls[1]: never used: acls[0] comes first and matches every initiator (initiators: ["*"]), and the first matching ACL wins
warning: `+file+`:29: acls[2]: never used: acls[0] comes first and matches every initiator (initiators: ["*"]), and the first matching ACL wins
warning: LUN 1 is only in ACLs that are never used: no initiator sees it
`, out)
}

// TestSummaryWithoutIdentity: a file without target.id_ext says where the identity will come
// from, and a LUN no ACL names is a warning.
func TestSummaryWithoutIdentity(t *testing.T) {
	file := filepath.Join(t.TempDir(), "w.yaml")
	require.NoError(t, os.WriteFile(file, []byte("listeners: [{address: \"::\", port: 5555}]\nluns:\n  - {lun: 0, backstore: null, size: 1MiB}\n  - {lun: 5, backstore: memory, size: 1MiB, read_only: true}\nacls:\n  - {initiators: [\"*\"], luns: [0]}\n"), 0o600))
	cfg, err := Check(file)
	require.NoError(t, err)
	out := cfg.Summary()
	require.Contains(t, out, "\ntarget: id_ext and ioc_guid from the node GUID of the first RDMA device (at start-up)\nlisteners (1):\n  [::]:5555\n")
	require.Contains(t, out, "\nLUNs (2):\n  LUN 0: null, 1MiB, 512-byte blocks\n  LUN 5: memory, 1MiB, 512-byte blocks, read-only\n")
	require.True(t, strings.HasSuffix(out, "\nwarning: LUN 5 is in no ACL: no initiator sees it\n"), out)
}
