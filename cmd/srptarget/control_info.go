package main

// The answers of the control commands status, sessions, luns and stats: what the daemon
// reports of itself, its sessions, its logical units and its counters.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

type statusInfo struct {
	Version string `json:"version"`
	// Build is what the daemon's binary is (srptarget version).
	Build  buildInfo `json:"build"`
	PID    int       `json:"pid"`
	Config string    `json:"config"`
	// State is "serving", or "waiting for an RDMA device" (serve started before the device).
	State            string         `json:"state"`
	Started          time.Time      `json:"started"`
	UptimeSeconds    float64        `json:"uptime_seconds"`
	IDExt            string         `json:"id_ext"`
	IOCGUID          string         `json:"ioc_guid"`
	IdentityFrom     string         `json:"identity_from"`
	Listeners        []listenerInfo `json:"listeners"`
	Devices          []string       `json:"devices"`
	DevicesError     string         `json:"devices_error,omitempty"`
	BufferPoolInUse  int64          `json:"buffer_pool_in_use"`
	BufferPoolSize   int64          `json:"buffer_pool_size"`
	Sessions         int            `json:"sessions"`
	Channels         int            `json:"channels"`
	CommandsInFlight int            `json:"commands_in_flight"`
}

type listenerInfo struct {
	Address string `json:"address"`
	// State is "listening", "failed" (its device went away; a reload listens again), or
	// listenerWaiting (no RDMA device has its address yet).
	State string `json:"state"`
}

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

// aclRef names the ACL that admitted an initiator: its index under acls and who it lists.
type aclRef struct {
	Index int `json:"index"`
	// Name is the ACL's name: when it has none, acls[Index].
	Name        string `json:"name"`
	Description string `json:"description"`
}

type lunRef struct {
	LUN      int  `json:"lun"`
	ReadOnly bool `json:"read_only"`
}

type sessionInfo struct {
	Initiator string   `json:"initiator"`
	Sources   []string `json:"sources"`
	// ACL is nil when the session's LUN map belongs to no ACL of the running configuration.
	ACL              *aclRef       `json:"acl"`
	LUNs             []lunRef      `json:"luns"`
	Channels         []channelInfo `json:"channels"`
	CommandsInFlight int           `json:"commands_in_flight"`
	LoginTime        time.Time     `json:"login_time"`
	// IO is the session's I/O counters, LUNIO the same per LUN (every LUN it has had).
	IO    ioCounts `json:"io"`
	LUNIO []lunIO  `json:"lun_io"`
}

type channelInfo struct {
	ID               uint64    `json:"id"`
	Source           string    `json:"source"`
	QPNum            uint32    `json:"qp_num"`
	Credits          int       `json:"credits"`
	CreditsHeld      int64     `json:"credits_held"`
	CommandsInFlight int       `json:"commands_in_flight"`
	LoginTime        time.Time `json:"login_time"`
}

type lunInfo struct {
	LUN       int    `json:"lun"`
	Backstore string `json:"backstore"`
	Path      string `json:"path,omitempty"`
	Size      uint64 `json:"size"`
	BlockSize uint32 `json:"block_size"`
	ReadOnly  bool   `json:"read_only"`
	// WriteCache is the WCE bit now, which an initiator may have changed with MODE SELECT.
	WriteCache       bool     `json:"write_cache"`
	ThinProvisioning bool     `json:"thin_provisioning"`
	Serial           string   `json:"serial"`
	Sessions         []string `json:"sessions"`
	// Reservations are the SCSI persistent reservations, when an initiator registered.
	Reservations *prInfo `json:"persistent_reservations,omitempty"`
	// IO is the logical unit's counters (every initiator, since the logical unit was made:
	// a reload that changes the LUN starts them again); Initiators the counters of each
	// session on this LUN number, busiest first.
	IO         ioCounts      `json:"io"`
	Initiators []initiatorIO `json:"initiators"`
}

// prInfo is what `srptarget luns` shows of a LUN's persistent reservations.
type prInfo struct {
	// Store is "rados" for reservations shared by the gateways of an RBD image (with the
	// stored version and whether this gateway's copy is known current), "" for the daemon's.
	Store      string `json:"store,omitempty"`
	Version    uint64 `json:"version,omitempty"`
	Stale      bool   `json:"stale,omitempty"`
	Generation uint32 `json:"generation"`
	// Type is the reservation type (SPC-4 table 212), 0 when nothing is reserved.
	Type          uint8            `json:"type"`
	Registrations []prRegistration `json:"registrations"`
}

type prRegistration struct {
	Key            string `json:"key"`
	Initiator      string `json:"initiator"`
	RelativePort   uint16 `json:"relative_target_port"`
	AllTargetPorts bool   `json:"all_target_ports,omitempty"`
	Holder         bool   `json:"holder,omitempty"`
}

// statEntry is one counter of srp.Target.Stats, in the order the struct has them.
type statEntry struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
	// Initiator and ACL are set on the per-session entries (initiator_*).
	Initiator string `json:"initiator,omitempty"`
	ACL       string `json:"acl,omitempty"`
}

// deviceNames lists the RDMA devices for status, or says why it cannot.
func deviceNames(devices devicesFunc) (names []string, why string) {
	names = []string{}
	if devices == nil {
		return names, errNoRDMA.Error()
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

func (s *controlServer) status(d *daemon) statusInfo {
	st := statusInfo{
		Version:       version,
		Build:         build,
		PID:           os.Getpid(),
		Config:        s.opts.configFile,
		State:         "serving",
		Started:       s.started.UTC().Truncate(time.Second),
		UptimeSeconds: time.Since(s.started).Round(time.Second).Seconds(),
		Listeners:     []listenerInfo{},
		Devices:       []string{},
	}
	if d == nil {
		st.State = statusWaitingDevice
		st.Devices, st.DevicesError = deviceNames(s.opts.devices)
		if cfg, err := config.LoadTrusted(s.opts.configFile); err == nil {
			for _, lc := range cfg.Listeners {
				for _, a := range listenAddrsOf(lc) {
					st.Listeners = append(st.Listeners, listenerInfo{Address: a.String(), State: waitingState(a)})
				}
			}
		}
		return st
	}
	if !d.serving() {
		st.State = statusWaitingDevice
	}
	d.mu.Lock()
	for ap := range d.pending {
		st.Listeners = append(st.Listeners, listenerInfo{Address: ap.String(), State: waitingState(ap)})
	}
	st.IDExt = fmt.Sprintf("%016x", d.ident.idExt)
	st.IOCGUID = fmt.Sprintf("%016x", d.ident.iocGUID)
	st.IdentityFrom = d.ident.from
	for ap, ls := range d.listeners {
		state := "listening"
		if ls.failed.Load() {
			state = "failed"
		}
		st.Listeners = append(st.Listeners, listenerInfo{Address: ap.String(), State: state})
	}
	d.mu.Unlock()
	slices.SortFunc(st.Listeners, func(a, b listenerInfo) int { return strings.Compare(a.Address, b.Address) })
	st.Devices, st.DevicesError = deviceNames(d.opts.devices)
	st.BufferPoolInUse, st.BufferPoolSize = d.target.PoolUse()
	for _, si := range d.target.Sessions() {
		st.Sessions++
		st.Channels += len(si.ChannelInfo)
		for _, ci := range si.ChannelInfo {
			st.CommandsInFlight += ci.InFlight
		}
	}
	return st
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
func (e *aclEntry) describe() *aclRef {
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
	return &aclRef{Index: e.index, Name: e.cfg.Label(e.index), Description: desc}
}

// lunRefs lists the LUNs of a map, in LUN order.
func lunRefs(m *scsi.LUNMap) []lunRef {
	out := []lunRef{}
	if m == nil {
		return out
	}
	for i := range m.Mappings() {
		mp := &m.Mappings()[i]
		out = append(out, lunRef{LUN: int(mp.LUN), ReadOnly: mp.WriteProtected()})
	}
	slices.SortFunc(out, func(a, b lunRef) int { return a.LUN - b.LUN })
	return out
}

func (d *daemon) sessionsInfo() []sessionInfo {
	d.mu.Lock()
	auth := d.auth
	d.mu.Unlock()
	out := []sessionInfo{}
	for _, si := range d.target.Sessions() {
		s := sessionInfo{Initiator: si.InitiatorPortID.String(), LUNs: lunRefs(si.LUNMap), Channels: []channelInfo{},
			IO: newIOCounts(si.Total()), LUNIO: []lunIO{}}
		for _, io := range si.IO {
			s.LUNIO = append(s.LUNIO, lunIO{LUN: int(io.LUN), ioCounts: newIOCounts(io.IOStats)})
		}
		if e := auth.aclOf(si.LUNMap); e != nil {
			s.ACL = e.describe()
		}
		for _, ci := range si.ChannelInfo {
			src := ci.Remote.Addr().Unmap().String()
			if !slices.Contains(s.Sources, src) {
				s.Sources = append(s.Sources, src)
			}
			s.Channels = append(s.Channels, channelInfo{
				ID: ci.ID, Source: ci.Remote.String(), QPNum: ci.QPNum, Credits: ci.Credits,
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

func (d *daemon) lunsInfo() []lunInfo {
	sessions := d.target.Sessions()
	ios := d.target.SessionIO()
	d.mu.Lock()
	defer d.mu.Unlock()
	byLUN := lunInitiators(d.auth, ios)
	out := []lunInfo{}
	for _, st := range d.luns {
		l := lunInfo{
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
			l.Reservations = &prInfo{Store: "rados", Version: pr.Version(), Stale: !pr.Fresh(), Generation: gen, Type: typ}
		}
		if regs, typ, gen := st.lu.Reservations().Registrations(); len(regs) > 0 || l.Reservations != nil {
			if l.Reservations == nil {
				l.Reservations = &prInfo{Generation: gen, Type: typ}
			}
			for _, r := range regs {
				l.Reservations.Registrations = append(l.Reservations.Registrations, prRegistration{
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
	slices.SortFunc(out, func(a, b lunInfo) int { return a.LUN - b.LUN })
	return out
}

// statEntries lists the target's counters in the order of srp.Stats, named in snake case.
func statEntries(s srp.Stats) []statEntry {
	out := []statEntry{
		{Name: "logins_accepted", Value: int64(s.LoginsAccepted)},
		{Name: "logins_rejected", Value: int64(s.LoginsRejected)},
		{Name: "logins_rejected_acl", Value: int64(s.RejectedByACL)},
	}
	for i, n := range s.Rejects {
		out = append(out, statEntry{Name: fmt.Sprintf("logins_rejected_%s", rejectName(i)), Value: int64(n)})
	}
	return append(out,
		statEntry{Name: "channels_open", Value: s.ChannelsOpen},
		statEntry{Name: "channels_closed", Value: int64(s.ChannelsClosed)},
		statEntry{Name: "commands", Value: int64(s.Commands)},
		statEntry{Name: "task_mgmt", Value: int64(s.TaskMgmt)},
		statEntry{Name: "aborted", Value: int64(s.Aborted)},
		statEntry{Name: "bytes_in", Value: int64(s.BytesIn)},
		statEntry{Name: "bytes_out", Value: int64(s.BytesOut)},
		statEntry{Name: "transport_errors", Value: int64(s.TransportErrors)},
		statEntry{Name: "protocol_errors", Value: int64(s.ProtocolErrors)},
		statEntry{Name: "rdma_errors", Value: int64(s.RDMAErrors)},
		statEntry{Name: "buffer_waits", Value: int64(s.BufferWaits)},
		statEntry{Name: "buffer_busy", Value: int64(s.BufferBusy)},
		statEntry{Name: "rdma_stalls", Value: int64(s.RDMAStalls)},
		statEntry{Name: "channels_idle_closed", Value: int64(s.IdleClosed)},
		statEntry{Name: "credit_violations", Value: int64(s.CreditViolations)},
		statEntry{Name: "credit_requests", Value: int64(s.CreditRequests)},
		statEntry{Name: "pool_in_use", Value: s.PoolInUse},
		statEntry{Name: "pool_high_mark", Value: s.PoolHighMark},
		statEntry{Name: "send_posts", Value: int64(s.SendPosts)},
		statEntry{Name: "send_wrs", Value: int64(s.SendWRs)},
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
