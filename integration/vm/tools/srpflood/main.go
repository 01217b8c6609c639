// Command srpflood is a misbehaving SRP initiator for the VM stress test (the "hog" scenario
// of TestStress, integration/vm/guest/checks): it logs in to an SRP target over RDMA/CM as ib_srp
// does (SRP_LOGIN_REQ in the 56-byte RDMA/CM form as the REQ's private data, RNR retry count
// 7), on -channels channels of one I_T nexus (MULTI-CHANNEL ACTION single, then multi),
// posts no receive buffer, sends large READ(10) commands, with direct data-in descriptors
// pointing into a buffer of its own registered for remote write, and then holds the
// connections open. Without -trickle it never receives anything. With -trickle it posts one
// receive buffer per channel every interval and answers each response with a new READ, so
// that one response per channel gets through per interval and every channel seems alive
// while its commands keep the target's buffers: the attack a stall watchdog that only asks
// whether anything completed does not see.
//
// The target's first response SEND finds no receive queued: the responder answers RNR NAK
// and, with an RNR retry count of 7, the target's QP retries it for ever (ibv_modify_qp(3),
// rnr_retry: "The value 7 is special and specify to retry infinite times in case of RNR";
// soft-RoCE: drivers/infiniband/sw/rxe/rxe_comp.c counts rnr_retry down only when it is not
// 7); the connection manager gives the target's QP the RNR retry count of the initiator's
// REQ. Every work request posted behind that SEND on the target's send queue waits too (the
// RDMA WRITEs of the other commands' data included). A target that keeps each command's data
// buffer until its response SEND completes keeps those buffers for as long as srpflood keeps
// the connection, and other initiators sharing the buffers wait. The login response needs no
// receive: over RDMA/CM it arrives in the REP's private data (ib_srp:
// drivers/infiniband/ulp/srp/ib_srp.c, srp_rdma_cm_handler passes
// event->param.conn.private_data to srp_cm_rep_handler).
//
//	srpflood -target 169.254.50.1:5556 -id-ext HEX -ioc-guid HEX [-initiator-ext HEX]
//	         [-initiator-guid HEX] [-lun N] [-commands N] [-size 8MiB] [-block-size 512]
//	         [-duration 60s] [-channels 1] [-trickle 0s] [-source ADDR]
//
// It exits after -duration (closing the connections: a DREQ each, so the target's channels end
// and their work requests flush), or earlier when the target has disconnected every channel.
// Output, one line each, for the scenario to parse:
//
//	SRPFLOOD login ok channel=N credits=N max_it_iu_len=N max_ti_iu_len=N local=ADDR remote=ADDR   (per channel)
//	SRPFLOOD sent commands=N bytes=N lun=N lba=N blocks=N channels=N trickle=D   (the first commands, all channels)
//	SRPFLOOD send completions ok=N failed=N after_s=F   (once as many commands reached the target)
//	SRPFLOOD end reason=duration|disconnected|device-removed after_s=F data_in_bytes=N send_ok=N send_failed=N responses=N
//
// after_s counts from the moment the commands were posted; data_in_bytes is how many bytes of
// the data buffer the target's RDMA WRITEs changed (the buffer is filled with 0xA5 first; a
// LUN that reads back 0xA5 would hide them). It is 0 when the first command needs no data
// (the CHECK CONDITION with the unit attention a new I_T nexus gets first, SPC-4 5.14) and
// its response is the SEND stuck in front of every WRITE. Exit status 0 for both ends, 1 on an error
// (login rejected, no device, ...), 2 for bad arguments.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// ib_srp's login values (drivers/infiniband/ulp/srp/ib_srp.c, srp_send_req and
// srp_max_it_iu_len with the module defaults cmd_sg_entries 12, use_imm_data 1,
// max_imm_data 8192; include/scsi/srp.h SRP_IMM_DATA_OFFSET).
const (
	itIULen       = 8260
	immDataOffset = 68
	rnrRetryCount = 7 // retry for ever, as ib_srp asks (srp_send_req: req->param.rnr_retry_count = 7)
	// responderResources is the RDMA READ depth ib_srp offers the target (srp_send_req:
	// responder_resources 4).
	responderResources = 4
	// fillByte fills the data buffer before the commands go out, so that the end line can
	// tell how much of it the target wrote.
	fillByte = 0xA5
	// readCDBOpcode is READ(10) (SBC-4 5.14).
	readCDBOpcode = 0x28
	// maxRead10Blocks is the largest TRANSFER LENGTH of READ(10): a 16-bit field.
	maxRead10Blocks = 0xFFFF
)

// config is the command line.
type config struct {
	target        netip.AddrPort
	idExt         uint64
	iocGUID       uint64
	initiatorExt  uint64
	initiatorGUID uint64
	lun           uint16
	commands      int
	size          uint32
	blockSize     uint32
	lba           uint32
	duration      time.Duration
	timeout       time.Duration
	channels      int
	trickle       time.Duration
	source        netip.Addr
}

func main() {
	cfg, err := parseArgs(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "srpflood:", err)
		os.Exit(2)
	}
	if err := run(cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "srpflood:", err)
		os.Exit(1)
	}
}

// parseArgs parses the command line; usage and flag errors go to stderr.
func parseArgs(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("srpflood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "the target's RDMA/CM listener, IP:PORT or [IPv6]:PORT (required)")
	idExt := fs.String("id-ext", "", "the target's id_ext, 16 hex digits as in ib_srp's add_target (required)")
	iocGUID := fs.String("ioc-guid", "", "the target's ioc_guid, 16 hex digits (required)")
	iniExt := fs.String("initiator-ext", "0", "initiator_ext: the first half of the INITIATOR PORT IDENTIFIER, hex")
	iniGUID := fs.String("initiator-guid", "", "the second half of the INITIATOR PORT IDENTIFIER, hex (default: -ioc-guid, the node GUID when initiator and target share the device)")
	lun := fs.Uint("lun", 0, "the LUN the READ(10) commands address")
	commands := fs.Int("commands", 16, "READ(10) commands to send (at most the credits the login grants)")
	size := fs.String("size", "8MiB", "bytes each command reads (a multiple of -block-size, at most 65535 blocks)")
	blockSize := fs.Uint("block-size", 512, "the LUN's logical block size: srpflood never receives, so it cannot ask")
	lba := fs.Uint("lba", 0, "the first logical block every command reads")
	duration := fs.Duration("duration", 60*time.Second, "how long to hold the connection after sending")
	timeout := fs.Duration("connect-timeout", 20*time.Second, "bound on address and route resolution and the login")
	channels := fs.Int("channels", 1, "channels of the I_T nexus to log in, each sending -commands")
	trickle := fs.Duration("trickle", 0, "post one receive per channel this often, and a new READ per response (0: never receive)")
	source := fs.String("source", "", "the local address to connect from (default: the route's)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var cfg config
	var err error
	if *target == "" {
		return cfg, errors.New("-target is required")
	}
	if cfg.target, err = netip.ParseAddrPort(*target); err != nil {
		return cfg, fmt.Errorf("-target: %w", err)
	}
	if *idExt == "" || *iocGUID == "" {
		return cfg, errors.New("-id-ext and -ioc-guid are required")
	}
	if cfg.idExt, err = parseHex64("-id-ext", *idExt); err != nil {
		return cfg, err
	}
	if cfg.iocGUID, err = parseHex64("-ioc-guid", *iocGUID); err != nil {
		return cfg, err
	}
	if cfg.initiatorExt, err = parseHex64("-initiator-ext", *iniExt); err != nil {
		return cfg, err
	}
	cfg.initiatorGUID = cfg.iocGUID
	if *iniGUID != "" {
		if cfg.initiatorGUID, err = parseHex64("-initiator-guid", *iniGUID); err != nil {
			return cfg, err
		}
	}
	if *lun > scsi.MaxLUN {
		return cfg, fmt.Errorf("-lun %d: at most %d", *lun, scsi.MaxLUN)
	}
	cfg.lun = uint16(*lun)
	if *commands < 1 {
		return cfg, fmt.Errorf("-commands %d: at least 1", *commands)
	}
	cfg.commands = *commands
	switch *blockSize {
	case 512, 1024, 2048, 4096:
		cfg.blockSize = uint32(*blockSize)
	default:
		return cfg, fmt.Errorf("-block-size %d: want 512, 1024, 2048 or 4096", *blockSize)
	}
	n, err := parseSize(*size)
	if err != nil {
		return cfg, fmt.Errorf("-size: %w", err)
	}
	if n == 0 || n%uint64(cfg.blockSize) != 0 || n/uint64(cfg.blockSize) > maxRead10Blocks {
		return cfg, fmt.Errorf("-size %s: want a multiple of the %d-byte block, 1 to %d blocks (READ(10))",
			*size, cfg.blockSize, maxRead10Blocks)
	}
	cfg.size = uint32(n)
	if uint64(*lba)+n/uint64(cfg.blockSize) > 1<<32 {
		return cfg, fmt.Errorf("-lba %d: the read would pass the 32-bit LBA of READ(10)", *lba)
	}
	cfg.lba = uint32(*lba)
	if *duration <= 0 {
		return cfg, fmt.Errorf("-duration %v: must be positive", *duration)
	}
	cfg.duration = *duration
	if *timeout <= 0 {
		return cfg, fmt.Errorf("-connect-timeout %v: must be positive", *timeout)
	}
	cfg.timeout = *timeout
	if *channels < 1 || *channels > 256 {
		return cfg, fmt.Errorf("-channels %d: 1 to 256", *channels)
	}
	cfg.channels = *channels
	if *trickle < 0 {
		return cfg, fmt.Errorf("-trickle %v: must not be negative", *trickle)
	}
	cfg.trickle = *trickle
	if *source != "" {
		if cfg.source, err = netip.ParseAddr(*source); err != nil {
			return cfg, fmt.Errorf("-source: %w", err)
		}
	}
	return cfg, nil
}

// parseHex64 parses 1 to 16 hex digits, with or without 0x, as ib_srp's add_target does for
// id_ext, ioc_guid and initiator_ext.
func parseHex64(name, s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if t == "" || len(t) > 16 {
		return 0, fmt.Errorf("%s %q: want 1 to 16 hex digits", name, s)
	}
	v, err := strconv.ParseUint(t, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want 1 to 16 hex digits", name, s)
	}
	return v, nil
}

// parseSize parses a byte count: a number with an optional suffix k/K/KiB, M/MiB or G/GiB
// (powers of 1024).
func parseSize(s string) (uint64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], s[i:]
	var mult uint64
	switch unit {
	case "", "B":
		mult = 1
	case "k", "K", "KiB", "kiB":
		mult = 1 << 10
	case "M", "MiB":
		mult = 1 << 20
	case "G", "GiB":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("%q: unknown unit %q (want k, M, G, KiB, MiB, GiB or none)", s, unit)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: not a byte count", s)
	}
	if v > (1<<63)/mult {
		return 0, fmt.Errorf("%q: too large", s)
	}
	return v * mult, nil
}

// portID builds an SRP port identifier from its two halves (identifier extension, then GUID),
// big-endian, as ib_srp fills them (srp_send_req: initiator_port_id = initiator_ext + the
// interface ID of the local GID; target_port_id = id_ext + ioc_guid).
func portID(ext, guid uint64) iu.PortID {
	var id iu.PortID
	for i := range 8 {
		id[i] = byte(ext >> (56 - 8*i))
		id[8+i] = byte(guid >> (56 - 8*i))
	}
	return id
}

// loginRequest is the 56-byte RDMA/CM SRP_LOGIN_REQ (struct srp_login_req_rdma) that ib_srp
// sends: tag 0, IT IU length 8260, direct and indirect descriptors, the MULTI-CHANNEL ACTION
// given (single for the first channel, multi for the others), immediate data requested at
// offset 68.
func loginRequest(cfg *config, action iu.LoginReqFlags) []byte {
	f := iu.LoginReqFields{
		ReqITIULen:      itIULen,
		ReqBufFmt:       iu.BufFormatDirect | iu.BufFormatIndirect,
		ReqFlags:        action | iu.ImmedRequested,
		ImmDataOffset:   immDataOffset,
		InitiatorPortID: portID(cfg.initiatorExt, cfg.initiatorGUID),
		TargetPortID:    portID(cfg.idExt, cfg.iocGUID),
	}
	b := make([]byte, iu.LoginReqRDMASize)
	iu.LoginReqRDMA(b).Encode(&f)
	return b
}

// readCDB is READ(10) (SBC-4 5.14) of blocks blocks from lba.
func readCDB(lba uint32, blocks uint16) [iu.CDBSize]byte {
	var c [iu.CDBSize]byte
	c[0] = readCDBOpcode
	c[2], c[3], c[4], c[5] = byte(lba>>24), byte(lba>>16), byte(lba>>8), byte(lba)
	c[7], c[8] = byte(blocks>>8), byte(blocks)
	return c
}

// readCmd is the SRP_CMD for command i: tag i+1, READ(10) of cfg.size bytes from cfg.lba,
// with a direct data-in descriptor for [va, va+cfg.size) under rkey.
func readCmd(cfg *config, i int, va uint64, rkey uint32) ([]byte, error) {
	f := iu.CmdFields{
		Tag:      iu.Tag(i + 1),
		LUN:      scsi.EncodeLUN(cfg.lun),
		TaskAttr: iu.TaskAttrSimple,
		CDB:      readCDB(cfg.lba, uint16(cfg.size/cfg.blockSize)),
		DataIn: iu.DataBufFields{
			Format: iu.DescDirect,
			Direct: iu.DirectBufFields{VA: va, Key: rkey, Len: cfg.size},
		},
	}
	n, err := iu.CmdLen(&f)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := iu.Cmd(b).Encode(&f); err != nil {
		return nil, err
	}
	return b, nil
}

// changed counts the bytes of b that are no longer fillByte.
func changed(b []byte) int {
	n := 0
	for _, x := range b {
		if x != fillByte {
			n++
		}
	}
	return n
}
