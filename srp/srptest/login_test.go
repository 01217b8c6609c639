package srptest

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

var (
	testIniPort = iu.PortID{0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56}
	testAddr    = netip.MustParseAddrPort("192.0.2.1:5555")
)

// The expected bytes below follow the kernel's include/scsi/srp.h field by field, written out
// by hand, with the values srp_send_req() stores.
func TestLoginRequestBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []byte
	}{
		{
			name: "RDMA/CM form, ib_srp defaults",
			cfg:  Config{InitiatorPortID: testIniPort, TargetPortID: testTargetPort},
			want: []byte{
				// struct srp_login_req_rdma
				0, 0, 0, 0, 0, 0, 0, 0, // u64 tag = 0
				0x00, 0x06, // __be16 req_buf_fmt = DIRECT | INDIRECT
				0x80,                   // u8 req_flags = SRP_MULTICHAN_SINGLE | SRP_IMMED_REQUESTED
				0x00,                   // u8 opcode = SRP_LOGIN_REQ
				0x00, 0x00, 0x20, 0x44, // __be32 req_it_iu_len = 8260
				0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56, // initiator_port_id
				0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, // target_port_id
				0x00, 0x44, // __be16 imm_data_offset = SRP_IMM_DATA_OFFSET 68
				0, 0, 0, 0, 0, 0, // u8 reserved[6]
			},
		},
		{
			name: "IB CM form, ib_srp defaults",
			cfg:  Config{LoginForm: LoginFormIBCM, InitiatorPortID: testIniPort, TargetPortID: testTargetPort},
			want: []byte{
				// struct srp_login_req
				0x00,                // u8 opcode
				0, 0, 0, 0, 0, 0, 0, // u8 reserved1[7]
				0, 0, 0, 0, 0, 0, 0, 0, // u64 tag
				0x00, 0x00, 0x20, 0x44, // __be32 req_it_iu_len = 8260
				0, 0, 0, 0, // u8 reserved2[4]
				0x00, 0x06, // __be16 req_buf_fmt
				0x80,       // u8 req_flags
				0,          // u8 reserved3[1]
				0x00, 0x44, // __be16 imm_data_offset = 68
				0, 0, // u8 reserved4[2]
				0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
				0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
			},
		},
		{
			// use_imm_data=0: no IMMED flag, imm_data_offset left 0 (kzalloc), and
			// srp_max_it_iu_len(12, false) = 48 + 16 + 20 + 12*16 = 276.
			name: "RDMA/CM form, use_imm_data off, further channel",
			cfg: Config{ImmediateData: Off, MultiChannel: iu.MultiChanMulti,
				InitiatorPortID: testIniPort, TargetPortID: testTargetPort},
			want: []byte{
				0, 0, 0, 0, 0, 0, 0, 0,
				0x00, 0x06,
				0x01, // SRP_MULTICHAN_MULTI
				0x00,
				0x00, 0x00, 0x01, 0x14, // 276
				0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
				0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
				0x00, 0x00,
				0, 0, 0, 0, 0, 0,
			},
		},
		{
			// cmd_sg_entries=255 without immediate data: 48 + 16 + 20 + 255*16 = 4164.
			name: "IB CM form, 255 descriptors, no immediate data, tag and solicited bits",
			cfg: Config{LoginForm: LoginFormIBCM, CmdSGEntries: 255, ImmediateData: Off,
				LoginTag: 0x0102030405060708, ExtraReqFlags: iu.LOSOLNT | iu.AESOLNT,
				InitiatorPortID: testIniPort, TargetPortID: testTargetPort},
			want: []byte{
				0x00, 0, 0, 0, 0, 0, 0, 0,
				0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
				0x00, 0x00, 0x10, 0x44, // 4164
				0, 0, 0, 0,
				0x00, 0x06,
				0x50, // LOSOLNT | AESOLNT
				0,
				0x00, 0x00,
				0, 0,
				0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
				0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
			},
		},
		{
			// An explicit IT IU length goes out as given (here 0x00018000 = 98304).
			name: "RDMA/CM form, explicit IT IU length",
			cfg:  Config{ITIULen: 0x18000, InitiatorPortID: testIniPort, TargetPortID: testTargetPort},
			want: []byte{
				0, 0, 0, 0, 0, 0, 0, 0,
				0x00, 0x06,
				0x80,
				0x00,
				0x00, 0x01, 0x80, 0x00,
				0, 0, 0, 0, 0, 0, 0, 1, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
				0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef,
				0x00, 0x44,
				0, 0, 0, 0, 0, 0,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Addr = testAddr
			got, err := LoginRequest(tc.cfg)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMaxITIULen(t *testing.T) {
	for _, tc := range []struct {
		sg      int
		imm     bool
		maxImm  int
		maxSize uint32
		want    uint32
	}{
		{12, true, 8192, 0, 8260},   // ib_srp defaults
		{12, false, 8192, 0, 276},   // use_imm_data=0
		{255, false, 8192, 0, 4164}, // cmd_sg_entries=255
		{255, true, 1024, 0, 4164},  // the descriptor room wins over a small max_imm_data
		{12, true, 8192, 4096, 4096},
		{1, false, 0, 0, 100},
	} {
		require.Equal(t, tc.want, MaxITIULen(tc.sg, tc.imm, tc.maxImm, tc.maxSize), "%+v", tc)
	}
}

func TestConfigRejects(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no address":             {},
		"queue depth 2":          {Addr: testAddr, QueueDepth: 2},
		"cmd_sg_entries 256":     {Addr: testAddr, CmdSGEntries: 256},
		"cmd_sg_entries -1":      {Addr: testAddr, CmdSGEntries: -1},
		"RNR retry 8":            {Addr: testAddr, RNRRetryCount: 8},
		"retry count 9":          {Addr: testAddr, RetryCount: 9},
		"login form 7":           {Addr: testAddr, LoginForm: 7},
		"port space UDP":         {Addr: testAddr, PortSpace: 0x0111},
		"multi-channel action 4": {Addr: testAddr, MultiChannel: 4},
		"negative max_imm_data":  {Addr: testAddr, MaxImmData: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cfg.withDefaults()
			require.ErrorIs(t, err, ErrConfig)
		})
	}
}

func TestDefaultInitiatorPortID(t *testing.T) {
	require.Equal(t,
		iu.PortID{0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 198, 0xff, 0xfe, 18, 0, 5},
		defaultInitiatorPortID(netip.MustParseAddr("198.18.0.5")))
	require.Equal(t,
		iu.PortID{0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55},
		defaultInitiatorPortID(netip.MustParseAddr("fe80::211:22ff:fe33:4455")))
}

func TestLinuxTag(t *testing.T) {
	// ib_srp stores blk_mq_unique_tag (hwq << 16 | tag) in host byte order: on x86 the TAG
	// bytes of hardware queue 1, tag 2 are 02 00 01 00 00 00 00 00.
	require.Equal(t, iu.Tag(0x0200010000000000), LinuxTag(1<<16|2))
	// The first task management tag, (0 + 1) | SRP_TAG_TSK_MGMT: 01 00 00 80 00 00 00 00.
	require.Equal(t, iu.Tag(0x0100008000000000), LinuxTag(1|tagTskMgmt))
	// SRP_TAG_NO_REQ for LOGICAL UNIT RESET: ff ff ff ff 00 00 00 00.
	require.Equal(t, iu.Tag(0xFFFFFFFF00000000), LUNResetTaskTag)
}
