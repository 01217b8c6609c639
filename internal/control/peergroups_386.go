package control

import (
	"fmt"
	"os/user"
	"strconv"
)

// peerGroups is, on 386, where getsockopt(2) is reached through socketcall(2) and neither
// syscall nor golang.org/x/sys/unix offers SO_PEERGROUPS, the supplementary groups the group
// database gives the Peer's user: its groups when it logs in, not necessarily the process's.
func peerGroups(_ int, uid uint32) ([]uint32, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil, nil // a user the database does not know has only its primary group
	}
	ids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("groups of uid %d: %w", uid, err)
	}
	var out []uint32
	for _, id := range ids {
		if g, err := strconv.ParseUint(id, 10, 32); err == nil {
			out = append(out, uint32(g))
		}
	}
	return out, nil
}
