package daemon

// The answers of the control commands status, sessions, luns and stats: what the daemon
// reports of itself, its sessions, its logical units and its counters.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

// listenerWaiting is the state of a listener whose address is on no RDMA device yet.
const listenerWaiting = "waiting for an RDMA device with this address"

// listenerWaitingIB is the state of an ib listener whose InfiniBand port is not there (yet).
const listenerWaitingIB = "waiting for an InfiniBand port"

// waitingState is the state of the pending listener a.
func waitingState(a listenAddr) string {
	if a.ib {
		return listenerWaitingIB
	}
	return listenerWaiting
}

// deviceNames lists the RDMA devices for status, or says why it cannot.
func deviceNames(devices DevicesFunc) (names []string, why string) {
	names = []string{}
	if devices == nil {
		return names, ErrNoRDMA.Error()
	}
	devs, err := devices()
	if err != nil {
		return names, err.Error()
	}
	for _, dev := range devs {
		names = append(names, dev.Name)
	}
	slices.Sort(names)
	return names, ""
}

// aclOf returns the ACL of the running configuration whose LUN map m is, or nil.
func (a *aclAuthorizer) aclOf(m *scsi.LUNMap) *aclEntry {
	if a == nil || m == nil {
		return nil
	}
	for _, e := range a.acls {
		if e.lunMap == m {
			return e
		}
	}
	return nil
}

// describe is a short description of an ACL: who it lists.
func (e *aclEntry) describe() *control.ACLRef {
	var who []string
	if len(e.cfg.Initiators) > 0 {
		who = append(who, "initiators "+strings.Join(e.cfg.Initiators, ", "))
	}
	if len(e.cfg.Sources) > 0 {
		who = append(who, "sources "+strings.Join(e.cfg.Sources, ", "))
	}
	desc := strings.Join(who, " or ")
	if e.cfg.ReadOnly {
		desc += ", read-only"
	}
	return &control.ACLRef{Index: e.index, Name: e.cfg.Label(e.index), Description: desc}
}

// lunRefs lists the LUNs of a map, in LUN order.
func lunRefs(m *scsi.LUNMap) []control.LUNRef {
	out := []control.LUNRef{}
	if m == nil {
		return out
	}
	for i := range m.Mappings() {
		mp := &m.Mappings()[i]
		out = append(out, control.LUNRef{LUN: int(mp.LUN), ReadOnly: mp.WriteProtected()})
	}
	slices.SortFunc(out, func(a, b control.LUNRef) int { return a.LUN - b.LUN })
	return out
}

func (d *daemon) sessionsInfo() []control.SessionInfo {
	d.mu.Lock()
	auth := d.auth
	d.mu.Unlock()
	out := []control.SessionInfo{}
	for _, si := range d.target.Sessions() {
		s := control.SessionInfo{Initiator: si.InitiatorPortID.String(), LUNs: lunRefs(si.LUNMap), Channels: []control.ChannelInfo{},
			IO: newIOCounts(si.Total()), LUNIO: []control.LUNIO{}}
		for _, io := range si.IO {
			s.LUNIO = append(s.LUNIO, control.LUNIO{LUN: int(io.LUN), IOCounts: newIOCounts(io.IOStats)})
		}
		if e := auth.aclOf(si.LUNMap); e != nil {
			s.ACL = e.describe()
		}
		for _, ci := range si.ChannelInfo {
			src, chSrc := ci.Remote.Addr().Unmap().String(), ci.Remote.String()
			if ci.RemoteIB != nil { // as an ACL's sources name it, and as the log does
				src, chSrc = "gid:"+ci.RemoteIB.GID.String(), ci.RemoteIB.String()
			}
			if !slices.Contains(s.Sources, src) {
				s.Sources = append(s.Sources, src)
			}
			s.Channels = append(s.Channels, control.ChannelInfo{
				ID: ci.ID, Source: chSrc, QPNum: ci.QPNum, Credits: ci.Credits,
				CreditsHeld: ci.CreditsHeld, CommandsInFlight: ci.InFlight, LoginTime: ci.LoginTime.UTC(),
			})
			s.CommandsInFlight += ci.InFlight
			if s.LoginTime.IsZero() || ci.LoginTime.Before(s.LoginTime) {
				s.LoginTime = ci.LoginTime.UTC()
			}
		}
		out = append(out, s)
	}
	return out
}

func (d *daemon) lunsInfo() []control.LUNInfo {
	sessions := d.target.Sessions()
	ios := d.target.SessionIO()
	d.mu.Lock()
	defer d.mu.Unlock()
	byLUN := lunInitiators(d.auth, ios)
	out := []control.LUNInfo{}
	for _, st := range d.luns {
		l := control.LUNInfo{
			LUN:              st.num,
			Backstore:        string(st.cfg.Backstore),
			Path:             st.cfg.Path,
			Size:             st.lu.Blocks() * uint64(st.lu.BlockSize()),
			BlockSize:        st.lu.BlockSize(),
			ReadOnly:         st.key.readOnly,
			WriteCache:       st.lu.WriteCacheEnabled(),
			ThinProvisioning: st.key.thin,
			Serial:           st.key.serial,
			Sessions:         []string{},
			IO:               lunTotals(st.lu),
			Initiators:       nonNil(byLUN[st.num]),
		}
		for _, i := range l.Initiators {
			if i.LastActive != nil && (l.IO.LastActive == nil || i.LastActive.After(*l.IO.LastActive)) {
				l.IO.LastActive = i.LastActive
			}
		}
		if pr := st.lu.Reservations(); pr.Shared() {
			_, typ, gen := pr.Registrations()
			l.Reservations = &control.PRInfo{Store: "rados", Version: pr.Version(), Stale: !pr.Fresh(), Generation: gen, Type: typ}
			for g, st := range pr.GroupStates() {
				l.Reservations.ALUA = append(l.Reservations.ALUA, control.GroupState{Group: g, State: st.String()})
			}
			slices.SortFunc(l.Reservations.ALUA, func(a, b control.GroupState) int { return int(a.Group) - int(b.Group) })
		}
		if regs, typ, gen := st.lu.Reservations().Registrations(); len(regs) > 0 || l.Reservations != nil {
			if l.Reservations == nil {
				l.Reservations = &control.PRInfo{Generation: gen, Type: typ}
			}
			for _, r := range regs {
				l.Reservations.Registrations = append(l.Reservations.Registrations, control.PRRegistration{
					Key:            fmt.Sprintf("0x%x", r.Key),
					Initiator:      iu.PortID(r.Initiator).String(),
					RelativePort:   r.RelativePort,
					AllTargetPorts: r.AllTargetPorts,
					Holder:         r.Holder || typ >= scsi.PRTypeWriteExclusiveAllRegistrants,
				})
			}
		}
		for _, si := range sessions {
			if si.LUNMap == nil {
				continue
			}
			for _, mp := range si.LUNMap.Mappings() {
				if mp.LU == st.lu {
					l.Sessions = append(l.Sessions, si.InitiatorPortID.String())
					break
				}
			}
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b control.LUNInfo) int { return a.LUN - b.LUN })
	return out
}

// statEntries lists the target's counters in the order of srp.Stats, named in snake case.
func statEntries(s srp.Stats) []control.StatEntry {
	out := []control.StatEntry{
		{Name: "logins_accepted", Value: int64(s.LoginsAccepted)},
		{Name: "logins_rejected", Value: int64(s.LoginsRejected)},
		{Name: "logins_rejected_acl", Value: int64(s.RejectedByACL)},
	}
	for i, n := range s.Rejects {
		out = append(out, control.StatEntry{Name: fmt.Sprintf("logins_rejected_%s", rejectName(i)), Value: int64(n)})
	}
	return append(out,
		control.StatEntry{Name: "channels_open", Value: s.ChannelsOpen},
		control.StatEntry{Name: "channels_closed", Value: int64(s.ChannelsClosed)},
		control.StatEntry{Name: "commands", Value: int64(s.Commands)},
		control.StatEntry{Name: "task_mgmt", Value: int64(s.TaskMgmt)},
		control.StatEntry{Name: "aborted", Value: int64(s.Aborted)},
		control.StatEntry{Name: "bytes_in", Value: int64(s.BytesIn)},
		control.StatEntry{Name: "bytes_out", Value: int64(s.BytesOut)},
		control.StatEntry{Name: "transport_errors", Value: int64(s.TransportErrors)},
		control.StatEntry{Name: "protocol_errors", Value: int64(s.ProtocolErrors)},
		control.StatEntry{Name: "rdma_errors", Value: int64(s.RDMAErrors)},
		control.StatEntry{Name: "buffer_waits", Value: int64(s.BufferWaits)},
		control.StatEntry{Name: "buffer_busy", Value: int64(s.BufferBusy)},
		control.StatEntry{Name: "rdma_stalls", Value: int64(s.RDMAStalls)},
		control.StatEntry{Name: "channels_idle_closed", Value: int64(s.IdleClosed)},
		control.StatEntry{Name: "credit_violations", Value: int64(s.CreditViolations)},
		control.StatEntry{Name: "credit_requests", Value: int64(s.CreditRequests)},
		control.StatEntry{Name: "pool_in_use", Value: s.PoolInUse},
		control.StatEntry{Name: "pool_high_mark", Value: s.PoolHighMark},
		control.StatEntry{Name: "send_posts", Value: int64(s.SendPosts)},
		control.StatEntry{Name: "send_wrs", Value: int64(s.SendWRs)},
	)
}

// rejectName names srp.Stats.Rejects[i]: the SRP_LOGIN_REJ reason 0x00010000+i (SRP r16a,
// table 10).
func rejectName(i int) string {
	names := [...]string{"unable_establish_channel", "insufficient_resources", "req_it_iu_length_too_large",
		"unable_associate_channel", "unsupported_descriptor_fmt", "multi_channel_unsupported", "channel_limit_reached"}
	if i < len(names) {
		return names[i]
	}
	return strconv.Itoa(i)
}

// nonNil is s, or an empty slice for nil: a JSON list rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
