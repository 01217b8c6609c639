package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

var required = []string{"-target", "169.254.50.1:5556", "-id-ext", "000000fffe000001", "-ioc-guid", "0x000000fffe000001"}

func parse(t *testing.T, extra ...string) (config, error) {
	t.Helper()
	var stderr bytes.Buffer
	return parseArgs(append(append([]string(nil), required...), extra...), &stderr)
}

func TestParseArgsDefaults(t *testing.T) {
	cfg, err := parse(t)
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddrPort("169.254.50.1:5556"), cfg.target)
	require.Equal(t, uint64(0xfffe000001), cfg.idExt)
	require.Equal(t, uint64(0xfffe000001), cfg.iocGUID)
	require.Zero(t, cfg.initiatorExt)
	require.Equal(t, cfg.iocGUID, cfg.initiatorGUID, "initiator GUID defaults to the ioc_guid")
	require.Zero(t, cfg.lun)
	require.Equal(t, 16, cfg.commands)
	require.Equal(t, uint32(8<<20), cfg.size)
	require.Equal(t, uint32(512), cfg.blockSize)
	require.Equal(t, 60*time.Second, cfg.duration)
	require.Equal(t, 1, cfg.channels)
	require.Zero(t, cfg.trickle, "no receive ever, by default")
	require.False(t, cfg.source.IsValid())
}

func TestParseArgsAll(t *testing.T) {
	cfg, err := parse(t, "-initiator-ext", "f1", "-initiator-guid", "0x1122334455667788", "-lun", "300",
		"-commands", "8", "-size", "4M", "-block-size", "4096", "-lba", "1024", "-duration", "25s",
		"-connect-timeout", "5s", "-channels", "4", "-trickle", "500ms", "-source", "169.254.50.9")
	require.NoError(t, err)
	require.Equal(t, 4, cfg.channels)
	require.Equal(t, 500*time.Millisecond, cfg.trickle)
	require.Equal(t, netip.MustParseAddr("169.254.50.9"), cfg.source)
	require.Equal(t, uint64(0xf1), cfg.initiatorExt)
	require.Equal(t, uint64(0x1122334455667788), cfg.initiatorGUID)
	require.Equal(t, uint16(300), cfg.lun)
	require.Equal(t, 8, cfg.commands)
	require.Equal(t, uint32(4<<20), cfg.size)
	require.Equal(t, uint32(4096), cfg.blockSize)
	require.Equal(t, uint32(1024), cfg.lba)
	require.Equal(t, 25*time.Second, cfg.duration)
	require.Equal(t, 5*time.Second, cfg.timeout)

	cfg, err = parse(t, "-target", "[fd53:5250::1]:5555")
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddrPort("[fd53:5250::1]:5555"), cfg.target)
}

func TestParseArgsErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-id-ext", "1", "-ioc-guid", "1"}, "-target is required"},
		{[]string{"-target", "169.254.50.1"}, "-target"},
		{[]string{"-target", "169.254.50.1:5556"}, "-id-ext and -ioc-guid are required"},
		{append(required[:2:2], "-id-ext", "xyz", "-ioc-guid", "1"), "-id-ext"},
		{append(required[:2:2], "-id-ext", "1", "-ioc-guid", "11223344556677889"), "-ioc-guid"},
		{append(required, "-initiator-ext", ""), "-initiator-ext"},
		{append(required, "-lun", "16384"), "-lun 16384"},
		{append(required, "-commands", "0"), "-commands 0"},
		{append(required, "-block-size", "520"), "-block-size 520"},
		{append(required, "-size", "1000"), "multiple of the 512-byte block"},
		{append(required, "-size", "32MiB"), "1 to 65535 blocks"},
		{append(required, "-size", "0"), "-size 0"},
		{append(required, "-size", "8T"), "unknown unit"},
		{append(required, "-size", "M"), "not a byte count"},
		{append(required, "-lba", "4294967295"), "32-bit LBA"},
		{append(required, "-duration", "0s"), "-duration 0s"},
		{append(required, "-connect-timeout", "-1s"), "-connect-timeout"},
		{append(required, "-channels", "0"), "-channels 0"},
		{append(required, "-trickle", "-1s"), "-trickle"},
		{append(required, "-source", "nowhere"), "-source"},
		{append(required, "extra"), "unexpected arguments"},
		{append(required, "-nosuchflag"), "not defined"},
	} {
		var stderr bytes.Buffer
		_, err := parseArgs(tt.args, &stderr)
		require.Error(t, err, "%q", tt.args)
		require.Contains(t, err.Error(), tt.want, "%q", tt.args)
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]uint64{
		"4096": 4096, "4096B": 4096, "64k": 64 << 10, "64K": 64 << 10, "64KiB": 64 << 10,
		"8M": 8 << 20, "8MiB": 8 << 20, "1G": 1 << 30, "1GiB": 1 << 30,
	} {
		got, err := parseSize(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "MiB", "8 MiB", "-1", "8Mb", "99999999999999999999", "9999999999999G"} {
		_, err := parseSize(s)
		require.Error(t, err, s)
	}
}

func TestLoginRequest(t *testing.T) {
	cfg, err := parse(t, "-initiator-ext", "f1", "-initiator-guid", "0102030405060708")
	require.NoError(t, err)
	b := loginRequest(&cfg, iu.MultiChanSingle)
	require.Len(t, b, iu.LoginReqRDMASize, "the 56-byte RDMA/CM form")
	f, err := iu.Parse[iu.LoginReqRDMA](b)
	require.NoError(t, err)
	require.Equal(t, iu.Tag(0), f.Tag)
	require.Equal(t, uint32(8260), f.ReqITIULen)
	require.Equal(t, iu.BufFormatDirect|iu.BufFormatIndirect, f.ReqBufFmt)
	require.Equal(t, iu.MultiChanSingle, f.ReqFlags.MultiChanAction())
	require.NotZero(t, f.ReqFlags&iu.ImmedRequested)
	require.Equal(t, uint16(68), f.ImmDataOffset)
	require.Equal(t, uint64(0xf1), f.InitiatorPortID.IDExt())
	require.Equal(t, uint64(0x0102030405060708), f.InitiatorPortID.GUID())
	require.Equal(t, uint64(0xfffe000001), f.TargetPortID.IDExt())
	require.Equal(t, uint64(0xfffe000001), f.TargetPortID.GUID())
	// the same bytes as the Go test initiator's for the same identifiers
	require.Equal(t, "0x00000000000000f10102030405060708", f.InitiatorPortID.String())

	// the further channels of the nexus join it
	f, err = iu.Parse[iu.LoginReqRDMA](loginRequest(&cfg, iu.MultiChanMulti))
	require.NoError(t, err)
	require.Equal(t, iu.MultiChanMulti, f.ReqFlags.MultiChanAction())
	require.Equal(t, "0x00000000000000f10102030405060708", f.InitiatorPortID.String())
}

func TestReadCmd(t *testing.T) {
	cfg, err := parse(t, "-lun", "3", "-lba", "70000", "-size", "8MiB")
	require.NoError(t, err)
	const va, rkey = 0x7f0012340000, 0xabcd
	b, err := readCmd(&cfg, 4, va, rkey)
	require.NoError(t, err)
	require.Len(t, b, iuSlot, "header, CDB and one direct descriptor fill the slot")
	f, err := iu.Cmd(b).Fields(68)
	require.NoError(t, err)
	require.Equal(t, iu.Tag(5), f.Tag)
	require.Equal(t, scsi.EncodeLUN(3), f.LUN)
	require.Equal(t, uint64(0x0003000000000000), f.LUN)
	require.Equal(t, iu.TaskAttrSimple, f.TaskAttr)
	require.Equal(t, iu.DescNone, f.DataOut.Format)
	require.Equal(t, iu.DescDirect, f.DataIn.Format)
	require.Equal(t, iu.DirectBufFields{VA: va, Key: rkey, Len: 8 << 20}, f.DataIn.Direct)
	// READ(10): opcode, LBA 70000 = 0x00011170, TRANSFER LENGTH 16384 blocks = 0x4000
	require.Equal(t, [iu.CDBSize]byte{0x28, 0, 0x00, 0x01, 0x11, 0x70, 0, 0x40, 0x00, 0}, f.CDB)

	cfg, err = parse(t, "-lun", "300", "-size", "512")
	require.NoError(t, err)
	b, err = readCmd(&cfg, 0, va, rkey)
	require.NoError(t, err)
	f, err = iu.Cmd(b).Fields(68)
	require.NoError(t, err)
	require.Equal(t, uint64(0x412c000000000000), f.LUN, "flat space addressing above 255")
	require.Equal(t, byte(1), f.CDB[8])
}

func TestChanged(t *testing.T) {
	b := bytes.Repeat([]byte{fillByte}, 100)
	require.Zero(t, changed(b))
	b[3], b[99] = 0, 1
	require.Equal(t, 2, changed(b))
}

func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseArgs([]string{"-h"}, &stderr)
	require.Error(t, err)
	for _, f := range []string{"-target", "-id-ext", "-ioc-guid", "-initiator-ext", "-commands", "-size", "-duration"} {
		require.True(t, strings.Contains(stderr.String(), f), f)
	}
}
