package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/srptarget/srptarget/ib/dm"
	"github.com/srptarget/srptarget/ib/umad"
)

// Timing of ib-discover's queries: each request waits this long for its answer (the kernel
// resends it), a few times, as srp_daemon's defaults (-t 5000 ms over all tries).
const (
	discoverTimeout = time.Second
	discoverRetries = 3
)

// umadExchanger sends requests through a client agent and waits for the answer of the same
// transaction id.
type umadExchanger struct {
	port *umad.Port
	to   umad.Addr
}

func (e *umadExchanger) Exchange(req dm.MAD) (dm.MAD, error) {
	if err := e.port.Send(req, e.to, discoverTimeout, discoverRetries); err != nil {
		return nil, err
	}
	rsp := make(dm.MAD, dm.MADSize)
	noAnswer := fmt.Errorf("no answer from LID %d to %s GET %#04x (no agent of that class on the port?): %w",
		e.to.LID, className(req.MgmtClass()), req.AttrID(), umad.ErrTimeout)
	// The kernel answers a request that got no response with its header and ETIMEDOUT after
	// timeout × retries; the deadline is for a fabric that does not (umad2sim).
	deadline := time.Now().Add(discoverTimeout * (discoverRetries + 2))
	for time.Now().Before(deadline) {
		_, status, err := e.port.Recv(rsp, time.Until(deadline))
		if errors.Is(err, umad.ErrTimeout) {
			break
		}
		if err != nil {
			return nil, err
		}
		if !dm.SameTID(rsp.TID(), req.TID()) {
			continue // a late answer to an earlier request
		}
		if status == syscall.ETIMEDOUT {
			return nil, noAnswer
		}
		return rsp, nil
	}
	return nil, noAnswer
}

func className(c uint8) string {
	if c == dm.ClassSubnAdm {
		return "Subnet Administration"
	}
	return "Device Management"
}

// localPort picks the port ib-discover asks from: the one named, or the first active
// InfiniBand port with a LID.
func localPort(ports []umad.PortInfo, name string) (umad.PortInfo, error) {
	for _, p := range ports {
		if name != "" && p.Name() == name || name == "" && p.InfiniBand() && p.LID != 0 {
			return p, nil
		}
	}
	if name != "" {
		return umad.PortInfo{}, fmt.Errorf("no umad port %s on this host", name)
	}
	return umad.PortInfo{}, errors.New("no InfiniBand port with a LID on this host (is a subnet manager running?)")
}

// portGID asks the subnet manager (SA NodeRecord) for the port GUID behind lid and returns
// its GID in the local port's subnet.
func portGID(local umad.PortInfo, lid uint16) (netip.Addr, error) {
	sa, err := umad.Open(local, dm.ClassSubnAdm, 2)
	if err != nil {
		return netip.Addr{}, err
	}
	defer sa.Close()
	req := make(dm.MAD, dm.MADSize)
	dm.NodeRecordRequest(req, lid, uint64(time.Now().UnixNano()))
	ex := &umadExchanger{port: sa, to: umad.Addr{LID: local.SMLID, QPN: 1, QKey: umad.QP1QKey}}
	rsp, err := ex.Exchange(req)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("asking the subnet manager (LID %d) for the port GUID of LID %d: %w", local.SMLID, lid, err)
	}
	guid, err := dm.NodeRecordPortGUID(rsp)
	if err != nil {
		return netip.Addr{}, err
	}
	g := local.GID.As16()
	for i := range 8 {
		g[8+i] = byte(guid >> (56 - 8*i))
	}
	return netip.AddrFrom16(g), nil
}

func newIBDiscoverCommand() *cobra.Command {
	var lid uint16
	var portName, gidFlag string
	var pkey uint16
	var verbose, dump bool
	cmd := &cobra.Command{
		Use:   "ib-discover --lid LID",
		Short: "Ask an InfiniBand port's Device Management agent for its SRP targets (root)",
		Long: `Send the Device Management GETs srp_daemon sends (IOUnitInfo, IOControllerProfile,
ServiceEntries) to the port with the given LID, and print an add_target line, in srp_daemon's
form, for every SRP target it advertises: srptarget dm-agent's, LIO's or SCST's ib_srpt's.
Unlike srp_daemon it does not first ask the subnet manager for ports whose
IsDeviceManagementSupported bit is set, which srptarget's ports never have.

It runs on the initiator, as root (it opens /dev/infiniband/umadN). The target's GID (dgid=)
comes from the subnet manager (its NodeRecord for the LID), or from --gid.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lid == 0 {
				return errors.New("--lid is required: the LID of the target's port (ibstat on the target, or saquery)")
			}
			ports, err := umad.Ports()
			if err != nil {
				return err
			}
			local, err := localPort(ports, portName)
			if err != nil {
				return err
			}
			var gid netip.Addr
			if gidFlag != "" {
				if gid, err = netip.ParseAddr(gidFlag); err != nil || !gid.Is6() {
					return fmt.Errorf("--gid %q: want a GID such as fe80::2:c903:a0:b0c2", gidFlag)
				}
			} else if gid, err = portGID(local, lid); err != nil {
				return err
			}
			if verbose {
				fmt.Fprintf(cmd.OutOrStdout(), "# LID %d: GID %v\n", lid, gid)
			}
			port, err := umad.Open(local, dm.ClassDeviceMgmt, 1)
			if err != nil {
				return err
			}
			defer port.Close()
			d := &dm.Discoverer{Ex: &umadExchanger{port: port, to: umad.Addr{LID: lid, QPN: 1, QKey: umad.QP1QKey}},
				TID: uint64(time.Now().UnixNano())}
			if dump {
				d.Trace = func(attr uint16, mod uint32, rsp dm.MAD) { dumpMAD(cmd.OutOrStdout(), attr, mod, rsp) }
			}
			targets, err := d.Discover()
			if err != nil {
				return err
			}
			return writeDiscovered(cmd.OutOrStdout(), targets, gid, pkey, verbose, local)
		},
	}
	cmd.Flags().Uint16Var(&lid, "lid", 0, "LID of the target's port")
	cmd.Flags().StringVar(&portName, "port", "", "local HCA port to ask from, ca/port (default: the first active InfiniBand port)")
	cmd.Flags().StringVar(&gidFlag, "gid", "", "the target port's GID, instead of asking the subnet manager")
	cmd.Flags().Uint16Var(&pkey, "pkey", 0xffff, "P_Key for the lines (hex with 0x)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also print each I/O controller's profile as comments")
	cmd.Flags().BoolVar(&dump, "dump", false, "also print every answer's header and data in hex, as comments")
	return cmd
}

// writeDiscovered prints the targets: srp_daemon's line for each, after a comment with the
// controller's profile when verbose.
func writeDiscovered(w io.Writer, targets []dm.Target, gid netip.Addr, pkey uint16, verbose bool, local umad.PortInfo) error {
	if len(targets) == 0 {
		return errors.New("the port answers but advertises no SRP target")
	}
	for _, t := range targets {
		if verbose {
			fmt.Fprintf(w, "# slot %d: I/O controller %016x %q, io_class %04x, send_size %d\n", t.Slot, t.IOCGUID, t.IDString, t.IOClass, t.SendSize)
		}
		if _, err := fmt.Fprintf(w, "%s\n", t.Line(gid, pkey)); err != nil {
			return err
		}
	}
	if verbose {
		fmt.Fprintf(w, "# asked from %s (LID %d); write a line to /sys/class/infiniband_srp/srp-%s-%d/add_target\n", local.Name(), local.LID, local.CA, local.Port)
	}
	return nil
}

// dumpMAD prints an answer as a comment: the attribute, the modifier and status, the header
// with the transaction id left out (the fabric rewrites its high bits), and the data up to its
// last byte that is not zero.
func dumpMAD(w io.Writer, attr uint16, mod uint32, rsp dm.MAD) {
	data := bytes.TrimRight(rsp.DMData(), "\x00")
	fmt.Fprintf(w, "# %s(%#x) %v: header %x %x data %x\n", dm.AttrName(attr), mod, rsp.Status(),
		[]byte(rsp[:8]), []byte(rsp[16:dm.DMDataOffset]), data)
}
