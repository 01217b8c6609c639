package iu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

// linuxRDMACMLogin builds, byte by byte, the private data that Linux ib_srp passes to
// rdma_connect() for add_target with dest= (srp_send_req() in
// drivers/infiniband/ulp/srp/ib_srp.c), following struct srp_login_req_rdma in
// include/scsi/srp.h. flags is the req_flags byte.
func linuxRDMACMLogin(flags byte) []byte {
	b := []byte{
		// u64 tag: ib_srp sets req->ib_req.tag = 0 and copies it.
		0, 0, 0, 0, 0, 0, 0, 0,
		// __be16 req_buf_fmt = cpu_to_be16(SRP_BUF_FORMAT_DIRECT | SRP_BUF_FORMAT_INDIRECT).
		0x00, 0x06,
		// u8 req_flags: SRP_MULTICHAN_SINGLE (0) or SRP_MULTICHAN_MULTI (1), ORed with
		// SRP_IMMED_REQUESTED (0x80) since use_imm_data defaults to on.
		flags,
		// u8 opcode = SRP_LOGIN_REQ.
		0x00,
		// __be32 req_it_iu_len = srp_max_it_iu_len(cmd_sg_entries=12, use_imm_data, 0)
		// = max(48 + 16 + 20 + 12*16, SRP_IMM_DATA_OFFSET 68 + max_imm_data 8192) = 8260.
		0x00, 0x00, 0x20, 0x44,
		// u8 initiator_port_id[16]: initiator_ext (here 0x0000000000000001) then the
		// interface ID of the source GID (soft-RoCE on a qemu NIC 52:54:00:12:34:56).
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
		// u8 target_port_id[16]: id_ext then ioc_guid from add_target.
		0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
		0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
		// __be16 imm_data_offset = cpu_to_be16(SRP_IMM_DATA_OFFSET) = 68
		// (sizeof(struct srp_cmd) 48 + SRP_MAX_ADD_CDB_LEN 16 + sizeof(struct srp_imm_buf) 4).
		0x00, 0x44,
		// u8 reserved[6] (the request is kzalloc'ed).
		0, 0, 0, 0, 0, 0,
	}
	return b
}

func TestLinuxRDMACMLogin(t *testing.T) {
	wantIni := iu.PortID{0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}
	wantTgt := iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef}

	for _, tc := range []struct {
		name   string
		flags  byte
		action iu.LoginReqFlags
	}{
		{"first channel", 0x80, iu.MultiChanSingle},
		{"further channel", 0x81, iu.MultiChanMulti},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := linuxRDMACMLogin(tc.flags)
			require.Len(t, b, 56, "sizeof(struct srp_login_req_rdma)")

			f, err := iu.ParseLoginReq(b)
			require.NoError(t, err)
			require.Equal(t, iu.Tag(0), f.Tag)
			require.Equal(t, uint32(8260), f.ReqITIULen)
			require.Equal(t, iu.BufFormatDirect|iu.BufFormatIndirect, f.ReqBufFmt)
			require.NotZero(t, f.ReqBufFmt&iu.BufFormatDirect)
			require.NotZero(t, f.ReqBufFmt&iu.BufFormatIndirect)
			require.Equal(t, tc.action, f.ReqFlags.MultiChanAction())
			require.NotZero(t, f.ReqFlags&iu.ImmedRequested, "IMMED requested")
			require.Zero(t, f.ReqFlags&(iu.LOSOLNT|iu.CRSOLNT|iu.AESOLNT), "ib_srp asks for no solicited notification")
			require.Equal(t, uint16(68), f.ImmDataOffset)
			require.Equal(t, wantIni, f.InitiatorPortID)
			require.Equal(t, uint64(1), f.InitiatorPortID.IDExt())
			require.Equal(t, uint64(0x505400fffe123456), f.InitiatorPortID.GUID())
			require.Equal(t, wantTgt, f.TargetPortID)
			require.Equal(t, "0x0002c90300abcdef0002c90300abcdef", f.TargetPortID.String())

			// The same logical login in the IB CM form decodes to the same fields, and
			// re-encoding the RDMA/CM form gives back the initiator's bytes.
			ib := make([]byte, 92) // IB CM REQ private data
			iu.LoginReq(ib).Encode(&f)
			fib, err := iu.ParseLoginReq(ib)
			require.NoError(t, err)
			require.Equal(t, f, fib)

			again := ffBuf(56)
			iu.LoginReqRDMA(again).Encode(&f)
			require.Equal(t, b, again)
		})
	}
}

func TestLoginRspForLinux(t *testing.T) {
	// What a target answers the login above with, as LIO does: credits = receives posted,
	// MAX IT IU = its receive buffer size (>= 8260), MAX TI IU = the requested IT IU length,
	// direct+indirect, IMMED granted. ib_srp checks opcode 0xC0 and reads exactly these fields.
	b := make([]byte, iu.LoginRspSize)
	n := iu.LoginRsp(b).Encode(&iu.LoginRspFields{
		ReqLimDelta: 64, Tag: 0, MaxITIULen: 8276, MaxTIIULen: 8260,
		SupBufFmt: iu.BufFormatDirect | iu.BufFormatIndirect,
		RspFlags:  iu.LoginRspMultiChanNoChan | iu.LoginRspImmedSupp,
	})
	require.Equal(t, 52, n)
	require.Equal(t, byte(0xC0), b[0], "opcode SRP_LOGIN_RSP")
	v := iu.LoginRsp(b)
	require.NoError(t, v.Validate())
	require.Equal(t, uint32(64), v.ReqLimDelta())
	require.Equal(t, uint32(8276), v.MaxITIULen())
	require.Equal(t, uint32(8260), v.MaxTIIULen())
	require.NotZero(t, v.RspFlags()&iu.LoginRspImmedSupp)
	require.Equal(t, iu.LoginRspMultiChanNoChan, v.RspFlags().MultiChanResult())
	require.Equal(t, iu.LoginRspFlags(0x10), iu.LoginRspSOLNT)
}
