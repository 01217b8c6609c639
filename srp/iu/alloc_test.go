package iu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/srp/iu"
)

// walkCmd is what the data path does per received SRP_CMD: locate and check the descriptors,
// then visit every direct descriptor (to post RDMA READs / WRITEs) or the immediate data.
func walkCmd(b []byte, immOff uint16) (sum uint64, err error) {
	c := iu.Cmd(b)
	var out, in iu.DataBuf
	if err := c.ParseDataBuffers(immOff, &out, &in); err != nil {
		return 0, err
	}
	sum += uint64(c.Tag()) + c.LUN() + uint64(c.CDB()[0])
	for _, d := range [2]iu.DataBuf{out, in} {
		for i := 0; i < d.NumDescriptors(); i++ {
			desc := d.DescriptorAt(i)
			sum += desc.VA() + uint64(desc.Key()) + uint64(desc.Len())
		}
		if d.External() {
			sum += d.TableDescriptor().VA()
		}
		sum += uint64(len(d.ImmediateData())) + uint64(d.Len())
	}
	return sum, nil
}

func TestDataPathAllocatesNothing(t *testing.T) {
	var cmds [][]byte
	var immOffs []uint16
	for _, tc := range cmdCases() {
		cmds = append(cmds, tc.want)
		immOffs = append(immOffs, tc.immOff)
	}
	for i, b := range cmds {
		_, err := walkCmd(b, immOffs[i])
		require.NoError(t, err)
	}

	var sink uint64
	allocs := testing.AllocsPerRun(100, func() {
		for i, b := range cmds {
			s, _ := walkCmd(b, immOffs[i])
			sink += s
		}
	})
	require.Zero(t, allocs, "SRP_CMD parsing and descriptor walking allocated")

	sendBuf := make([]byte, 256)
	sense := make([]byte, 18)
	sense[0], sense[2], sense[7], sense[12] = 0x70, 0x05, 10, 0x24
	allocs = testing.AllocsPerRun(100, func() {
		// SCSI response with sense data and a residual.
		f := iu.RspFields{ReqLimDelta: 1, Tag: 42, Flags: iu.DIUNDER, Status: 0x02, DataInResCnt: 512, SenseData: sense}
		n, err := iu.Rsp(sendBuf).Encode(&f)
		if err != nil {
			panic(err)
		}
		sink += uint64(n)
		// Task management response.
		sink += uint64(iu.Rsp(sendBuf).EncodeTskMgmt(43, 1, iu.TskMgmtFuncNotSupp))
		// Control IUs of the send path.
		sink += uint64(iu.TLogout(sendBuf).Encode(&iu.TLogoutFields{Reason: iu.TLogoutInvalidIULength}))
		sink += uint64(iu.CredReq(sendBuf).Encode(&iu.CredReqFields{ReqLimDelta: 2, Tag: 44}))
		// The initiator's answer to a credit request, as the receive path reads it.
		sink += uint64(iu.CredRsp(sendBuf).Encode(&iu.CredRspFields{Tag: 45}))
		if err := iu.CredRsp(sendBuf).Validate(); err != nil {
			panic(err)
		}
		sink += uint64(iu.CredRsp(sendBuf).Tag())
	})
	require.Zero(t, allocs, "encoding SRP_RSP, SRP_T_LOGOUT or SRP_CRED_REQ, or reading SRP_CRED_RSP, allocated")
	require.NotZero(t, sink)
}
