// Package checks holds the checks that run inside the test VM (integration/vm): the daemon
// against the kernel's SRP initiator over soft-RoCE, driven with sg3_utils, fio, mkfs and
// dm-multipath, and judged from what the initiator sees and from the daemon's own typed
// answers (srptarget status, sessions, luns and stats --json, /metrics).
//
// The scenarios are Go tests behind the build tag vmguest, compiled on the host and run in the
// guest by guest/checks.sh:
//
//	CGO_ENABLED=0 go test -c -tags vmguest -o checks.test ./integration/vm/guest/checks
//	integration/vm/e2e.sh run='E2E/LUN_0'      # one check again (go test's -run)
//
// Each check is a subtest and one row of the VM's result table ("name|pass|detail", the file
// /init prints); a check that needs a running daemon or a logged-in initiator gets it from the
// scenario's fixtures, so that -run can select it alone. Checks that are steps of one
// sequence (a restart, a large-I/O login) are grouped under one subtest and are selected
// together.
//
// What the daemon logs is read only through Daemon.LogLines with a Msg of logmsg.go, whose
// texts integration/logpins_test.go holds to the daemon's source. Without the tag the package
// is the harness alone, whose parsers of sg3_utils' and the kernel's output are tested on the
// host against output captured in the VM (testdata/).
package checks
