package control

// The results of the commands, as the daemon encodes them in Response.Result and the
// commands decode them: what the daemon reports of itself, its sessions, its logical units,
// its counters, a reload and an ACL check.

import (
	"encoding/json"
	"time"
)

// BuildInfo says what a binary is: srptarget version, status, the log's first line, the man
// pages and the srptarget_build_info metric show it.
type BuildInfo struct {
	// Version is the release, then the commit's first 12 hex digits when known, then
	// ".modified" when the tree had uncommitted changes: 0.1.0+7960dc2c1a0b.modified
	// (SemVer 2.0's build metadata).
	Version    string `json:"version"`
	Release    string `json:"release"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
	// Backstores are the backstore kinds this binary serves: rbd only when built with the
	// rbd tag, which links librbd and librados (and Ceph's libraries with them).
	Backstores []string `json:"backstores"`
}

type StatusInfo struct {
	Version string `json:"version"`
	// Build is what the daemon's binary is (srptarget version).
	Build  BuildInfo `json:"build"`
	PID    int       `json:"pid"`
	Config string    `json:"config"`
	// BackstoreIO is how file and block LUNs are read and written: io_uring or sync;
	// BackstoreIONote why it is sync, when it is.
	BackstoreIO     string `json:"backstore_io"`
	BackstoreIONote string `json:"backstore_io_note,omitempty"`
	// State is "serving", or "waiting for an RDMA device" (serve started before the device).
	State            string         `json:"state"`
	Started          time.Time      `json:"started"`
	UptimeSeconds    float64        `json:"uptime_seconds"`
	IDExt            string         `json:"id_ext"`
	IOCGUID          string         `json:"ioc_guid"`
	IdentityFrom     string         `json:"identity_from"`
	Listeners        []ListenerInfo `json:"listeners"`
	Devices          []string       `json:"devices"`
	DevicesError     string         `json:"devices_error,omitempty"`
	BufferPoolInUse  int64          `json:"buffer_pool_in_use"`
	BufferPoolSize   int64          `json:"buffer_pool_size"`
	Sessions         int            `json:"sessions"`
	Channels         int            `json:"channels"`
	CommandsInFlight int            `json:"commands_in_flight"`
}

type ListenerInfo struct {
	Address string `json:"address"`
	// State is "listening", "failed" (its device went away; a reload listens again), or
	// listenerWaiting (no RDMA device has its address yet).
	State string `json:"state"`
}

// ACLRef names the ACL that admitted an initiator: its index under acls and who it lists.
type ACLRef struct {
	Index int `json:"index"`
	// Name is the ACL's name: when it has none, acls[Index].
	Name        string `json:"name"`
	Description string `json:"description"`
}

type LUNRef struct {
	LUN      int  `json:"lun"`
	ReadOnly bool `json:"read_only"`
}

type SessionInfo struct {
	Initiator string   `json:"initiator"`
	Sources   []string `json:"sources"`
	// ACL is nil when the session's LUN map belongs to no ACL of the running configuration.
	ACL              *ACLRef       `json:"acl"`
	LUNs             []LUNRef      `json:"luns"`
	Channels         []ChannelInfo `json:"channels"`
	CommandsInFlight int           `json:"commands_in_flight"`
	LoginTime        time.Time     `json:"login_time"`
	// IO is the session's I/O counters, LUNIO the same per LUN (every LUN it has had).
	IO    IOCounts `json:"io"`
	LUNIO []LUNIO  `json:"lun_io"`
}

type ChannelInfo struct {
	ID               uint64    `json:"id"`
	Source           string    `json:"source"`
	QPNum            uint32    `json:"qp_num"`
	Credits          int       `json:"credits"`
	CreditsHeld      int64     `json:"credits_held"`
	CommandsInFlight int       `json:"commands_in_flight"`
	LoginTime        time.Time `json:"login_time"`
}

type LUNInfo struct {
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
	Reservations *PRInfo `json:"persistent_reservations,omitempty"`
	// IO is the logical unit's counters (every initiator, since the logical unit was made:
	// a reload that changes the LUN starts them again); Initiators the counters of each
	// session on this LUN number, busiest first.
	IO         IOCounts      `json:"io"`
	Initiators []InitiatorIO `json:"initiators"`
}

// PRInfo is what `srptarget luns` shows of a LUN's persistent reservations.
type PRInfo struct {
	// Store is "rados" for reservations shared by the gateways of an RBD image (with the
	// stored version and whether this gateway's copy is known current), "" for the daemon's.
	Store      string `json:"store,omitempty"`
	Version    uint64 `json:"version,omitempty"`
	Stale      bool   `json:"stale,omitempty"`
	Generation uint32 `json:"generation"`
	// Type is the reservation type (SPC-4 table 212), 0 when nothing is reserved.
	Type          uint8            `json:"type"`
	Registrations []PRRegistration `json:"registrations"`
	// ALUA are the asymmetric access states SET TARGET PORT GROUPS set for every gateway of
	// the image, which override the configured ones, by group.
	ALUA []GroupState `json:"alua_states,omitempty"`
}

// GroupState is a target port group's shared asymmetric access state.
type GroupState struct {
	Group uint16 `json:"group"`
	State string `json:"state"`
}

type PRRegistration struct {
	Key            string `json:"key"`
	Initiator      string `json:"initiator"`
	RelativePort   uint16 `json:"relative_target_port"`
	AllTargetPorts bool   `json:"all_target_ports,omitempty"`
	Holder         bool   `json:"holder,omitempty"`
}

// StatEntry is one counter of srp.Target.Stats, in the order the struct has them.
type StatEntry struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
	// Initiator and ACL are set on the per-session entries (initiator_*).
	Initiator string `json:"initiator,omitempty"`
	ACL       string `json:"acl,omitempty"`
}

// IOCounts is the JSON form of srp.IOStats.
type IOCounts struct {
	Commands     uint64 `json:"commands"`
	ReadBytes    uint64 `json:"read_bytes"`
	WrittenBytes uint64 `json:"written_bytes"`
	Errors       uint64 `json:"errors"`
	// LastActive is when a command was last answered (to within rdma_timeout/8); null: never.
	LastActive *time.Time `json:"last_active"`
}

// LUNIO is a session's counters on one LUN.
type LUNIO struct {
	LUN int `json:"lun"`
	IOCounts
}

// InitiatorIO is one session's counters on a LUN, for luns.
type InitiatorIO struct {
	Initiator string `json:"initiator"`
	ACL       string `json:"acl"`
	IOCounts
}

// LogLevelResult is the answer of log-level: the level the daemon logs at now and, after a
// change, the one before.
type LogLevelResult struct {
	Level    string `json:"level"`
	Previous string `json:"previous,omitempty"`
}

// ReloadResult is what a reload did, or with DryRun would do.
type ReloadResult struct {
	DryRun bool `json:"dry_run"`
	// Applied is true when the new configuration runs now.
	Applied bool `json:"applied"`
	// Errors are the reasons a reload is refused, as the log has them (file:line: key: ...).
	Errors           []string        `json:"errors,omitempty"`
	Warnings         []string        `json:"warnings,omitempty"`
	LUNsAdded        []int           `json:"luns_added"`
	LUNsChanged      []int           `json:"luns_changed"`
	LUNsRemoved      []int           `json:"luns_removed"`
	LUNsUnchanged    []int           `json:"luns_unchanged"`
	ListenersAdded   []string        `json:"listeners_added"`
	ListenersRemoved []string        `json:"listeners_removed"`
	Sessions         []SessionChange `json:"sessions"`
	// PortGroupsChanged describes each ALUA target port group whose state, preference or
	// ports change ("group 2: standby -> active/optimized").
	PortGroupsChanged []string `json:"port_groups_changed"`
	// Waiting: the daemon waits for an RDMA device and runs no configuration yet; the file
	// was checked (Errors empty: it is valid) and is the one it starts with.
	Waiting bool `json:"waiting,omitempty"`
	// PathsNotChecked: the dry run planned a client's text only, opening no backstore and
	// looking at no path it names, as the client is neither root nor the daemon's user.
	PathsNotChecked bool `json:"paths_not_checked,omitempty"`
	// LUNChanges and ACLChanges are the settings that change, key by key (reloaddiff.go);
	// DataLoss says which memory LUNs lose their data.
	LUNChanges []LUNChange `json:"lun_changes"`
	ACLChanges []ACLChange `json:"acl_changes"`
	DataLoss   []string    `json:"data_loss"`
}

// SessionChange is what a reload does to one logged-in initiator: the LUNs it loses (removed
// from its map, or replaced by a changed logical unit), the LUNs it gains, and whether it is
// disconnected (no ACL admits it any more) or some of its channels are (their sources are
// granted other LUNs than its first channel's).
type SessionChange struct {
	Initiator            string `json:"initiator"`
	LosesLUNs            []int  `json:"loses_luns,omitempty"`
	ChangedLUNs          []int  `json:"changed_luns,omitempty"`
	GainsLUNs            []int  `json:"gains_luns,omitempty"`
	Disconnected         bool   `json:"disconnected,omitempty"`
	ChannelsDisconnected int    `json:"channels_disconnected,omitempty"`
}

// FieldChange is one setting a reload changes: its key as in the file, its value before and
// after ("" when the key is not set: its default applies).
type FieldChange struct {
	Key  string `json:"key"`
	From string `json:"from"`
	To   string `json:"to"`
}

// LUNChange is the settings of a LUN that both configurations have and that differ. DataLost:
// a memory LUN that gets new, empty memory.
type LUNChange struct {
	LUN      int           `json:"lun"`
	Fields   []FieldChange `json:"fields"`
	DataLost bool          `json:"data_lost,omitempty"`
}

// ACLChange is an ACL added, removed or changed, named by its index in the file.
type ACLChange struct {
	ACL    string        `json:"acl"`
	Change string        `json:"change"` // added, removed or changed
	Fields []FieldChange `json:"fields"`
}

// Disruptive reports whether applying res cuts an initiator off (a session or some of its
// channels disconnected, LUNs taken away) or loses data: what reload asks about on a terminal.
func (r *ReloadResult) Disruptive() bool {
	if len(r.DataLoss) > 0 {
		return true
	}
	for _, s := range r.Sessions {
		if s.Disconnected || s.ChannelsDisconnected > 0 || len(s.LosesLUNs) > 0 {
			return true
		}
	}
	return false
}

// MarshalJSON gives every list of the answer as a list, [] when empty, whatever the outcome
// (a refused reload fills none of them), so that a script can read any of them as it is.
func (r ReloadResult) MarshalJSON() ([]byte, error) {
	type plain ReloadResult
	n := plain(r)
	n.LUNsAdded, n.LUNsChanged, n.LUNsRemoved, n.LUNsUnchanged = nonNil(n.LUNsAdded), nonNil(n.LUNsChanged), nonNil(n.LUNsRemoved), nonNil(n.LUNsUnchanged)
	n.ListenersAdded, n.ListenersRemoved, n.PortGroupsChanged = nonNil(n.ListenersAdded), nonNil(n.ListenersRemoved), nonNil(n.PortGroupsChanged)
	n.Sessions, n.LUNChanges, n.ACLChanges, n.DataLoss = nonNil(n.Sessions), nonNil(n.LUNChanges), nonNil(n.ACLChanges), nonNil(n.DataLoss)
	return json.Marshal(n)
}

// ACLCheckResult answers acl-check.
type ACLCheckResult struct {
	// From is "daemon" (the running configuration) or the configuration file read locally.
	From      string  `json:"from"`
	Initiator string  `json:"initiator"`
	Source    string  `json:"source,omitempty"`
	ACL       *ACLRef `json:"acl"`
	// LUNs are what the initiator would see; Refusal what the log would say when none admits it.
	LUNs    []LUNRef `json:"luns"`
	Refusal string   `json:"refusal,omitempty"`
}

// nonNil is s, or an empty slice for nil: a JSON list rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
