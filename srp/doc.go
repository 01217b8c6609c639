// Package srp is the SCSI RDMA Protocol (SRP) target engine: logins, RDMA channels, sessions
// (I_T nexuses), credits, the data path that moves SRP_CMD data with RDMA READ and WRITE, and
// task management. It answers each SCSI command through package scsi and each IU through the
// wire formats of package srp/iu. target.go describes the engine in one page; docs/design.md
// draws a channel's phases and a command's stages.
//
// The files are layered, each calling only into those below it. At the ground: the wire views
// (srp/iu), limits and configuration (config.go), and the value types that each own one
// concern: the buffer pool (pool.go, pools.go, pool_cache.go), the phase and stage tables
// (channel_state.go), the credit ledger (credits.go), the stall watchdog's marks
// (stallwatch.go), the receive rings (recvring.go), the QP number table (qpntable.go), the
// backstore queue's ring (ring.go), a group's way of waiting (netyield.go), the channel's
// parts (channel_parts.go) and the counters (counters.go). Above them, the objects
// (engine.go). Above those, the methods by concern, from the command context (cmd.go), what a
// channel asks of its poll group (group_handoff.go), sessions and the registry, buffers
// (channel_data.go), sends (channel_send.go, channel_ctl.go) and commands (channel_recv.go),
// to a channel's timer and closing (watchdog.go, channel_close.go, channel_step.go) and a
// group's pass (group.go); at the top the target itself (target.go), logins (login.go) and
// listeners (listen.go). Two cycles are in the nature of the data path and stay: a response
// that frees a context starts the command parked for it (channel_send.go to channel_recv.go),
// and a command that ends in the backstore queue comes back to the channel (group_io.go to
// channel_recv.go).
package srp
