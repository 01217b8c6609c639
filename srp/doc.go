// Package srp is the SCSI RDMA Protocol (SRP) target engine: logins, RDMA channels, sessions
// (I_T nexuses), credits, the data path that moves SRP_CMD data with RDMA READ and WRITE, and
// task management. It answers each SCSI command through package scsi and each IU through the
// wire formats of package srp/iu. target.go describes the engine in one page; docs/design.md
// draws a channel's phases and a command's stages.
package srp
