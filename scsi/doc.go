// Package scsi emulates a SCSI direct-access block device (SPC-4 and SBC-3) on top of a backstore.
//
// It knows nothing of SRP or RDMA. A transport hands in a Command (CDB, the I_T nexus, the task
// attribute and tag, and the payload buffers it owns) and gets back status, sense data and the
// number of bytes produced. Payload buffers belong to the caller — on the SRP path they are
// registered RDMA memory — so READ reads from the backstore straight into DataIn and WRITE writes
// straight from DataOut.
//
// The package's pieces:
//   - LogicalUnit: one LU with its backstore, mode pages, unit attentions per nexus and task set.
//   - LUNMap: what one initiator sees (LUN numbers to logical units, optionally read-only), the
//     entry point that routes a command and answers for LUNs that do not exist.
//   - Sense data built from one table of reasons (sense.go), fixed or descriptor format. The
//     decoders of CDB fields and parameter lists are pure: they return a fault (a Reason and
//     the field pointer) and the handler fails the command with it (Command.failOn).
//   - One command table (opcodes.go, spc.go, sbc.go) with each command's CDB usage data: what
//     REPORT SUPPORTED OPERATION CODES reports is what the handlers evaluate, every other bit
//     is refused but for the obsolete ones each command lists as ignored (TestCDBReservedBits
//     checks it bit by bit).
//   - Reservations: the persistent (SPC-4 5.13) and SPC-2 reservations of one LU, kept apart
//     from the LogicalUnit so that a replacement LU takes them over; checked for every command
//     with one atomic load (pr.go, prout.go, reserve.go).
//   - ALUA: target port groups and their asymmetric access states (alua.go), shared by the
//     target ports that point at it; each command is checked against its port's state.
package scsi
