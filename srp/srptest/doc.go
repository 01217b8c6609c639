// Package srptest is an SRP initiator for tests, in the spirit of net/http/httptest: it logs in
// to an SRP target over the in-memory fabric (ib/memfabric) and behaves, byte for byte and
// credit for credit, like the Linux ib_srp initiator (drivers/infiniband/ulp/srp/ib_srp.c) with
// its default parameters, so that the target engine and the integration tests can check the
// target against the initiator it has to serve without a kernel.
//
// What it copies from ib_srp, and why it matters to a target:
//
//   - Login: the 56-byte RDMA/CM form of SRP_LOGIN_REQ in the RDMA/CM TCP port space (or the
//     64-byte IB CM form in the IB port space, as a dgid= login reaches an AF_IB listener), TAG 0,
//     buffer formats direct+indirect, MULTI-CHANNEL ACTION single for the first channel and
//     multi for the others, IMMED requested with offset 68, REQUESTED MAX IT IU LENGTH 8260
//     (srp_max_it_iu_len), responder resources 4, initiator depth 0, RNR retry 7.
//   - Receive ring: QueueDepth buffers of the MAXIMUM TI IU LENGTH the target returned, posted
//     once after the login response, re-posted after each IU.
//   - Credits: the login's REQUEST LIMIT DELTA, minus one per SRP_CMD / SRP_TSK_MGMT, plus the
//     delta of every SRP_RSP (known tag or not), SRP_CRED_REQ and SRP_AER_REQ. A command is only
//     sent while more than one credit is left (one is kept for task management); the number of
//     commands in flight is can_queue = min(credits-1, QueueDepth-2).
//   - Tags: blk_mq_unique_tag (channel index << 16 | per-channel tag) stored in host byte order
//     (little-endian, as on x86), so the bytes on the wire are those of a Linux initiator. Task
//     management tags have bit 31 set (SRP_TAG_TSK_MGMT); LOGICAL UNIT RESET carries task tag
//     0xFFFFFFFF (SRP_TAG_NO_REQ).
//   - Data: every data buffer is registered per command with a fresh rkey (as fast registration
//     does) and deregistered as soon as its SRP_RSP arrives, so an RDMA operation the target
//     issues after its response fails with a remote access error, as on real hardware. Writes
//     that fit go as immediate data (SRP-2) when the target granted it.
//   - SRP_CRED_REQ and SRP_AER_REQ are answered at once with SRP_CRED_RSP / SRP_AER_RSP, which
//     take no credit; SRP_T_LOGOUT is only recorded (ib_srp ignores it).
//
// Typical use in a test:
//
//	fab := memfabric.New(memfabric.Options{})
//	defer fab.Close()
//	// ... start the target on a node of fab, listening on addr ...
//	ch, err := srptest.Login(ctx, fab, srptest.Config{Addr: addr, TargetPortID: port})
//	require.NoError(t, err)
//	defer ch.Close()
//	rsp, err := ch.Write10(ctx, 0, 0, data, 512) // immediate data: it fits in 8260 bytes
//	require.NoError(t, err)
//	require.NoError(t, rsp.Err())
//	rsp, err = ch.Do(ctx, &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096,
//		Layout: srptest.Indirect{N: 3}})
//
// Every Channel must be ended with Close, Logout or Vanish (closing the fabric also ends its
// goroutine). Failures below SCSI come back as errors wrapping the sentinels in errors.go;
// SCSI status is in Response (Response.Err turns a non-GOOD status into an error).
//
// Where ib_srp has a choice that a test wants to steer (descriptor layouts, explicit tags, raw
// IUs, logging out with SRP_I_LOGOUT, vanishing without a DREQ), the Request, Config and
// Channel methods expose it. Registration access rights are stricter than ib_srp's (data-in
// buffers are only remotely writable, data-out buffers and descriptor tables only remotely
// readable) so that a target moving data in the wrong direction fails visibly.
package srptest
