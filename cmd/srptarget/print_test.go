package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/control"
)

// TestAnswersAsText: sessions, luns and stats print the daemon's answers (as the daemon's
// tests check them over the control socket) for people: who admitted a session, the I/O
// counters per session, LUN and initiator, and the persistent reservations.
func TestAnswersAsText(t *testing.T) {
	const rw, ro = "0x0000000000000000000000000000aaaa", "0x0000000000000000000000000000bbbb"
	at := time.Now().Add(-time.Minute).UTC()
	io := func(cmds, read, written, errs uint64) control.IOCounts {
		return control.IOCounts{Commands: cmds, ReadBytes: read, WrittenBytes: written, Errors: errs, LastActive: &at}
	}
	ss := []control.SessionInfo{{
		Initiator: rw, Sources: []string{"192.0.2.7"}, LoginTime: at,
		ACL:   &control.ACLRef{Index: 0, Name: "db-hosts", Description: "initiators " + rw},
		IO:    io(14, 48<<10, 32<<10, 2),
		LUNIO: []control.LUNIO{{LUN: 0, IOCounts: io(6, 0, 32<<10, 1)}, {LUN: 1, IOCounts: io(8, 48<<10, 0, 1)}},
	}}
	out := sessionsText(ss)
	require.Contains(t, out, "admitted by acls[0] db-hosts (initiators "+rw+")")
	require.Contains(t, out, "  I/O: 14 commands, 48 KiB read, 32 KiB written, 2 errors, last active ")
	require.Contains(t, out, "    LUN 1: 8 commands, 48 KiB read, 0 bytes written, 1 error, last active ")

	ls := []control.LUNInfo{{
		LUN: 1, Backstore: "memory", Size: 16 << 20, BlockSize: 512, Serial: "s1", Sessions: []string{},
		IO:         io(14, 72<<10, 512, 3),
		Initiators: []control.InitiatorIO{{Initiator: rw, ACL: "db-hosts", IOCounts: io(8, 48<<10, 0, 1)}, {Initiator: ro, ACL: "backup", IOCounts: io(6, 24<<10, 512, 2)}},
		Reservations: &control.PRInfo{Store: "rados", Version: 3, Generation: 1, Type: 6, Registrations: []control.PRRegistration{
			{Key: "0x1234", Initiator: rw, RelativePort: 1, Holder: true},
		}},
	}}
	out = lunsText(ls)
	require.Contains(t, out, "  I/O: 14 commands, 72 KiB read, 512 bytes written, 3 errors, last active ")
	require.Contains(t, out, "    "+ro+" (backup): 6 commands, 24 KiB read, 512 bytes written, 2 errors, last active ")
	require.Contains(t, out, "  persistent reservation: Exclusive Access, registrants only, generation 1, shared through RADOS (version 3, current)\n"+
		"    key 0x1234: "+rw+" via port 1, holder\n")
	ls[0].Reservations.Stale = true
	require.Contains(t, lunsText(ls), "shared through RADOS (version 3, NOT known current: commands fail until it is)")
	require.NotContains(t, out, "ALUA states")
	ls[0].Reservations.ALUA = []control.GroupState{{Group: 1, State: "active/non-optimized"}, {Group: 2, State: "active/optimized"}}
	require.Contains(t, lunsText(ls), "  ALUA states set by SET TARGET PORT GROUPS, for every gateway: group 1 active/non-optimized, group 2 active/optimized\n")

	es := []control.StatEntry{{Name: "commands", Value: 22},
		{Name: "initiator_commands", Value: 14, Initiator: rw, ACL: "db-hosts"},
		{Name: "initiator_read_bytes", Value: 48 << 10, Initiator: rw, ACL: "db-hosts"},
		{Name: "initiator_written_bytes", Value: 32 << 10, Initiator: rw, ACL: "db-hosts"},
		{Name: "initiator_errors", Value: 2, Initiator: rw, ACL: "db-hosts"},
		{Name: "initiator_last_active", Value: at.Unix(), Initiator: rw, ACL: "db-hosts"}}
	require.Contains(t, statsText(es), "per initiator (bytes read: sent to it; written: received from it):\n  "+rw+
		" (db-hosts): 14 commands, 48 KiB read, 32 KiB written, 2 errors, last active ")
}
