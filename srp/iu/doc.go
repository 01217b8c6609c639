// Package iu holds the wire formats of the SCSI RDMA Protocol: the information units (IUs)
// that travel in RDMA SENDs and in the connection manager's private data, and the data buffer
// descriptors inside SRP_CMD. It knows nothing of channels, sessions, credits or login policy;
// package srp, the target engine, decides what to answer and uses this package to read and
// write the bytes.
//
// Layouts follow T10 SRP r16a (with the SRP-2 immediate data additions) as the Linux kernel's
// include/scsi/srp.h declares them, cross-checked against the Linux initiator
// (drivers/infiniband/ulp/srp), the LIO and SCST targets (srpt) and illumos' COMSTAR srpt. All
// multi-byte numbers are big-endian. Constants carry the names srp.h gives them.
//
// Every IU follows one contract, in the style of gVisor's pkg/tcpip/header:
//
//   - a view type over the bytes, `type Cmd []byte`, whose accessors read fields in place with
//     encoding/binary.BigEndian. Views never copy and never allocate, because the data path
//     parses one SRP_CMD and builds one SRP_RSP per SCSI command straight in registered
//     receive and send buffers;
//   - Validate, the check of untrusted input: length, opcode and the consistency of length
//     fields, returning an error that wraps ErrShort, ErrOpcode, ErrInconsistent or
//     ErrUnsupportedFormat with the offending values, never panicking. Accessors do not check
//     bounds, so call Validate first (for SRP_CMD, DataBuffers validates and walks the
//     descriptors in one pass);
//   - a Fields struct with Fields() to decode and Encode to write the whole IU, reserved bytes
//     as zero, into a caller-supplied buffer, returning the number of bytes written and never
//     writing past it.
//
// Encoders of fixed-size IUs cannot fail: they take a buffer of at least the IU's size (the
// ...Size constants) and, like encoding/binary's Put functions, panic if it is shorter, so
// that the target's send paths carry no error they would have to ignore. Encoders of
// variable-length IUs (SRP_CMD, SRP_RSP, SRP_AER_REQ) return an error instead, because their
// length depends on the content: an SRP_RSP whose sense data does not fit the initiator's
// MAXIMUM TARGET-TO-INITIATOR IU LENGTH is an ErrShort the caller handles.
package iu
