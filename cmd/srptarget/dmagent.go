package main

// srptarget dm-agent: the InfiniBand Device Management agent of the target, a separate
// privileged helper (it needs the umad devices, root only), and srptarget ib-discover, its
// initiator side.

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib/dm"
	"github.com/srptarget/srptarget/ib/umad"
	"github.com/srptarget/srptarget/internal/daemon"
)

// dmRecvWait bounds each wait for a MAD, so that the agent notices SIGTERM.
const dmRecvWait = 500 * time.Millisecond

// serveDM answers the Device Management requests that reach port until ctx ends.
func serveDM(ctx context.Context, port *umad.Port, a *dm.Agent, log *zap.Logger) error {
	req, rsp := make(dm.MAD, dm.MADSize), make(dm.MAD, dm.MADSize)
	for ctx.Err() == nil {
		from, _, err := port.Recv(req, dmRecvWait)
		if errors.Is(err, umad.ErrTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		if !a.Answer(req, rsp) {
			continue
		}
		if err := port.Send(rsp, from.Reply(), 0, 0); err != nil {
			log.Warn("sending a Device Management answer failed", zap.Error(err))
			continue
		}
		log.Info("Device Management request answered",
			zap.Uint16("from_lid", from.LID), zap.Uint32("from_qpn", from.QPN),
			zap.String("attribute", fmt.Sprintf("%#04x", req.AttrID())), zap.String("modifier", fmt.Sprintf("%#x", req.AttrMod())),
			zap.Stringer("status", rsp.Status()))
	}
	return nil
}

func newDMAgentCommand(deps loginLineDeps) *cobra.Command {
	var configFile, logFormat string
	cmd := &cobra.Command{
		Use:   "dm-agent",
		Short: "Answer InfiniBand Device Management queries for the ib listeners (root)",
		Long: `Answer the InfiniBand Device Management GETs (IOUnitInfo, IOControllerProfile,
ServiceEntries) that srp_daemon, ibsrpdm and srptarget ib-discover send to find SRP targets,
on the InfiniBand ports of the configuration's ib listeners, as the kernel's ib_srpt answers
them: one I/O controller per ioc_guid, a service entry SRP.T10:<id_ext> per target port and
ib listener, with the listener's service ID.

It is a separate process from serve because it needs /dev/infiniband/umadN, which only root
may open (the umad devices also give access to subnet management). It cannot run beside a
loaded ib_srpt, which owns the Device Management class on every port.

srp_daemon and ibsrpdm send their queries only to ports whose IsDeviceManagementSupported
capability bit is set, and only kernel code can set it: with the bit clear (the agent says so
at start-up) they never ask, however correct the answers. srptarget ib-discover asks anyway.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logFormat, "info")
			if err != nil {
				return err
			}
			cfg, id, err := loadIdentity(cmd, configFile, config.LoadTrusted, deps.devices)
			if err != nil {
				return err
			}
			agent, err := daemon.DMAgentFor(cfg, id)
			if err != nil {
				return err
			}
			all, err := umad.Ports()
			if err != nil {
				return err
			}
			ports := daemon.DMPorts(cfg, all)
			if len(ports) == 0 {
				return fmt.Errorf("no InfiniBand port of the ib listeners has a umad device (%d umad ports on this host)", len(all))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runDMAgent(ctx, agent, ports, log)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", DefaultConfigFile, "configuration file")
	cmd.Flags().StringVar(&logFormat, "log-format", logAuto, "log format: auto, console, json, journal")
	return cmd
}

// runDMAgent opens an agent on each port, then answers on all of them until ctx ends.
func runDMAgent(ctx context.Context, agent *dm.Agent, ports []umad.PortInfo, log *zap.Logger) error {
	for _, c := range agent.IOCs {
		for _, s := range c.Services {
			log.Info("advertising", zap.String("ioc_guid", fmt.Sprintf("%016x", c.GUID)),
				zap.String("id_ext", fmt.Sprintf("%016x", s.IDExt)), zap.String("service_id", fmt.Sprintf("%016x", s.ServiceID)))
		}
	}
	opened := make([]*umad.Port, 0, len(ports))
	defer func() {
		for _, p := range opened {
			p.Close()
		}
	}()
	for _, p := range ports {
		port, err := umad.Open(p, dm.ClassDeviceMgmt, 1, dm.MethodGet, dm.MethodSet)
		if err != nil {
			return err
		}
		opened = append(opened, port)
	}
	// A port that fails stops them all: the agent is a service, its unit restarts it whole.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(opened))
	for _, port := range opened {
		p := port.Info()
		plog := log.With(zap.String("port", p.Name()), zap.Uint16("lid", p.LID))
		if p.CapMask&umad.CapIsDM == 0 {
			plog.Warn("IsDeviceManagementSupported is clear on this port: srp_daemon and ibsrpdm will never query it (only kernel code can set the bit; user space has no interface for it). Initiators find the target with srptarget ib-discover --lid, or use srptarget login-line's add_target lines",
				zap.String("cap_mask", fmt.Sprintf("%#08x", p.CapMask)))
		}
		plog.Info("answering Device Management queries")
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveDM(ctx, port, agent, plog); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errc)
	err := <-errc
	log.Info("stopped answering Device Management queries", zap.Error(err))
	return err
}
