package srp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestChannelScripts runs the scripts in testdata/channel: sequences of events (an IU from
// the initiator, a pass of the channel, a worker or the task management goroutine finishing,
// the clock moving, a stop request) and what the initiator sees after each, with no goroutine
// of the channel running and no sleep. The target is real (login, ACL, logical units on
// files); its channels are driven by the script (srp.Target.ScriptChannels), and the fabric
// is memfabric in synchronous mode, so a work request completes as soon as the other side
// can take it. Run with -rewrite to regenerate the expected output after a deliberate change.
//
// Directives (name= picks the initiator, default a):
//
//	login [recvs=N]        log a raw initiator in, with N receive buffers posted (default 16)
//	send                   send the IUs of the input, one a line (see scriptIU)
//	step                   let the channel work; prints what the initiator received
//	exec                   one worker runs the oldest command handed to it
//	tmf                    the task management goroutine starts the oldest function
//	post-recv n=N          the initiator posts N more receive buffers
//	advance by=D           the channel's clock moves by D (timers fire)
//	stop [graceful]        a stop request (as Target.Shutdown, or a reload)
//	state                  the channel's phase, counters, queues and contexts
//	ready                  whether a completion or event has signalled the channel's Ready
//	                       since its last step ("woken"), which would wake it from sleep
//	data tag=T             what the data buffer of command T holds
//	stats                  the target's counters that the scripts look at
//	log                    the target's warnings and errors since the last log directive
func TestChannelScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/channel", func(t *testing.T, path string) {
		h := newHarness(t, harnessOpts{fileLUN: true})
		scripted := h.tgt.ScriptChannels()
		inits := map[string]*scriptInit{}
		logSeen := 0
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			name := "a"
			td.MaybeScanArgs(t, "name", &name)
			if td.Cmd == "login" {
				require.NotContains(t, inits, name)
				recvs := 16
				td.MaybeScanArgs(t, "recvs", &recvs)
				addr := fmt.Sprintf("198.18.0.%d", len(inits)+1)
				cfg := h.cfg()
				cfg.InitiatorPortID[15] = byte(len(inits) + 1) // one I_T nexus each
				si := &scriptInit{raw: newRawConnCfg(t, h, addr, recvs, cfg), bufs: map[uint64][]byte{}}
				select {
				case si.ch = <-scripted:
				case <-time.After(10 * time.Second):
					t.Fatal("the login was not accepted")
				}
				if len(inits) == 0 {
					// First of the cleanups: before the harness shuts the target down.
					t.Cleanup(func() {
						var all []*srp.Scripted
						for _, si := range inits {
							all = append(all, si.ch)
						}
						srp.FinishScripted(all...)
						for _, si := range inits {
							for _, mr := range si.mrs {
								require.NoError(t, mr.Deregister())
							}
						}
					})
				}
				inits[name] = si
				return si.received()
			}
			if td.Cmd == "log" {
				// The target's warnings and errors since the last log directive.
				var b strings.Builder
				all := h.logs.All()
				for _, e := range all[logSeen:] {
					if e.Level >= zapcore.WarnLevel {
						fmt.Fprintf(&b, "%s %s\n", e.Level.CapitalString(), e.Message)
					}
				}
				logSeen = len(all)
				return b.String()
			}
			if td.Cmd == "stats" {
				st := h.tgt.Stats()
				return fmt.Sprintf("commands %d, task management %d, aborted %d, credit requests %d, protocol errors %d, rdma stalls %d, buffer busy %d\n",
					st.Commands, st.TaskMgmt, st.Aborted, st.CreditRequests, st.ProtocolErrors, st.RDMAStalls, st.BufferBusy)
			}
			si := inits[name]
			require.NotNil(t, si, "%s: no initiator %q (login first)", td.Pos, name)
			switch td.Cmd {
			case "send":
				for _, line := range strings.Split(strings.TrimSpace(td.Input), "\n") {
					si.raw.send(si.iu(t, line))
				}
				return ""
			case "step":
				over := si.ch.Step()
				out := si.received()
				if over {
					out += "channel drained\n"
				}
				return out
			case "exec":
				// One command, or all=true: every command handed to the workers.
				out := ""
				for {
					tag, ok := si.ch.Exec()
					if !ok {
						break
					}
					out += fmt.Sprintf("worker ran tag %d\n", tag)
					if !td.HasArg("all") {
						break
					}
				}
				if out == "" {
					return "no command waits for a worker\n"
				}
				return out
			case "tmf":
				if n, ok := si.ch.TMF(); ok {
					return fmt.Sprintf("task management claimed %d commands\n", n)
				}
				return "no task management function waits\n"
			case "post-recv":
				var n int
				td.ScanArgs(t, "n", &n)
				si.raw.postRecv(n)
				return ""
			case "advance":
				var by string
				td.ScanArgs(t, "by", &by)
				d, err := time.ParseDuration(by)
				require.NoError(t, err)
				si.ch.Advance(d)
				return ""
			case "stop":
				si.ch.Stop(td.HasArg("graceful"), "script")
				return ""
			case "state":
				return si.ch.State()
			case "ready":
				if si.ch.Woken() {
					return "woken\n"
				}
				return "asleep\n"
			case "data":
				var tag uint64
				td.ScanArgs(t, "tag", &tag)
				return describeData(si.bufs[tag]) + "\n"
			}
			t.Fatalf("%s: unknown directive %q", td.Pos, td.Cmd)
			return ""
		})
	})
}

// scriptInit is one initiator of a script: a raw connection and the target's channel for it.
type scriptInit struct {
	raw  *rawConn
	ch   *srp.Scripted
	bufs map[uint64][]byte // data buffers by command tag
	mrs  []ib.MR
}

// received describes the IUs the initiator received since the last call, one a line.
func (si *scriptInit) received() string {
	var b strings.Builder
	for _, iu := range si.raw.poll() {
		b.WriteString(describeIU(iu))
		b.WriteByte('\n')
	}
	return b.String()
}

// iu builds the IU a script line names:
//
//	tur tag=T                      TEST UNIT READY
//	read tag=T lba=L blocks=N      READ(10), data-in to a buffer of the initiator
//	write tag=T lba=L blocks=N     WRITE(10) of testutil.Pattern(seed T), data-out by RDMA READ
//	short tag=T bytes=N            an SRP_CMD cut to N bytes (malformed)
//	abort-task tag=T task=U        SRP_TSK_MGMT ABORT TASK of tag U, LUN 0
//	lun-reset tag=T                SRP_TSK_MGMT LOGICAL UNIT RESET, LUN 0
//	bad-type tag=T                 an SRP_RSP, which only a target sends
//	cred-rsp tag=T                 SRP_CRED_RSP
//	logout                         SRP_I_LOGOUT
func (si *scriptInit) iu(t *testing.T, line string) []byte {
	fields := strings.Fields(line)
	args := map[string]uint64{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		require.True(t, ok, "argument %q of %q", f, line)
		var n uint64
		_, err := fmt.Sscan(v, &n)
		require.NoError(t, err, "argument %q of %q", f, line)
		args[k] = n
	}
	tag := iu.Tag(args["tag"])
	switch fields[0] {
	case "tur":
		return tur(tag)
	case "short":
		return tur(tag)[:args["bytes"]]
	case "read", "write":
		n := int(args["blocks"]) * testBlockSize
		lba := uint32(args["lba"])
		cdb := [16]byte{0x28, 0, byte(lba >> 24), byte(lba >> 16), byte(lba >> 8), byte(lba), 0, byte(args["blocks"] >> 8), byte(args["blocks"])}
		buf := make([]byte, n)
		access := ib.AccessLocalWrite | ib.AccessRemoteWrite
		if fields[0] == "write" {
			cdb[0] = 0x2A
			copy(buf, testutil.Pattern(n, int(tag)))
			access = ib.AccessRemoteRead
		}
		mr, err := si.raw.pd.RegisterMemory(buf, access)
		require.NoError(t, err)
		si.mrs = append(si.mrs, mr)
		si.bufs[uint64(tag)] = buf
		desc := iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: mr.Addr(), Key: mr.RKey(), Len: uint32(n)}}
		f := iu.CmdFields{Tag: tag, CDB: cdb}
		if fields[0] == "write" {
			f.DataOut = desc
		} else {
			f.DataIn = desc
		}
		b, err := srptest.EncodeCmd(&f)
		require.NoError(t, err)
		return b
	case "abort-task", "lun-reset":
		f := iu.TskMgmtFields{Tag: tag, Func: iu.TskLUNReset}
		if fields[0] == "abort-task" {
			f.Func, f.TaskTag = iu.TskAbortTask, iu.Tag(args["task"])
		}
		b := make([]byte, iu.TskMgmtSize)
		iu.TskMgmt(b).Encode(&f)
		return b
	case "bad-type":
		// An SRP_RSP: a target-to-initiator IU the initiator must not send.
		b := make([]byte, iu.RspMinSize)
		_, err := iu.Rsp(b).Encode(&iu.RspFields{Tag: tag})
		require.NoError(t, err)
		return b
	case "cred-rsp":
		b := make([]byte, iu.CredRspSize)
		iu.CredRsp(b).Encode(&iu.CredRspFields{Tag: tag})
		return b
	case "logout":
		b := make([]byte, iu.ILogoutSize)
		iu.ILogout(b).Encode(&iu.ILogoutFields{})
		return b
	}
	t.Fatalf("unknown IU %q", line)
	return nil
}

// describeIU prints an IU the target sent, with the fields a script checks.
func describeIU(b []byte) string {
	switch iu.Opcode(b[0]) {
	case iu.OpRsp:
		r := iu.Rsp(b)
		s := fmt.Sprintf("SRP_RSP tag %d delta %d", r.Tag(), r.ReqLimDelta())
		if rd := r.RespData(); len(rd) >= 4 {
			return s + fmt.Sprintf(" task management response %#02x", rd[3])
		}
		s += fmt.Sprintf(" status %#02x", r.Status())
		if sense := r.SenseData(); len(sense) >= 14 {
			s += fmt.Sprintf(" sense %x/%02x/%02x", sense[2]&0x0F, sense[12], sense[13])
		}
		if f := r.Flags(); f&iu.DIUNDER != 0 {
			s += fmt.Sprintf(" data-in residual %d", r.DataInResCnt())
		}
		return s
	case iu.OpCredReq:
		r := iu.CredReq(b)
		return fmt.Sprintf("SRP_CRED_REQ tag %d delta %d", r.Tag(), r.ReqLimDelta())
	case iu.OpTLogout:
		return fmt.Sprintf("SRP_T_LOGOUT reason %v", iu.TLogout(b).Reason())
	}
	return fmt.Sprintf("IU %x", b)
}

// describeData says what a data buffer holds: zeros, one of the scripts' patterns, or other.
func describeData(b []byte) string {
	if b == nil {
		return "no such buffer"
	}
	zero := true
	for _, x := range b {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		return fmt.Sprintf("%d bytes of zeros", len(b))
	}
	for seed := 0; seed < 256; seed++ {
		if string(testutil.Pattern(len(b), seed)) == string(b) {
			return fmt.Sprintf("%d bytes of pattern %d", len(b), seed)
		}
	}
	return fmt.Sprintf("%d bytes, neither zeros nor a pattern", len(b))
}
