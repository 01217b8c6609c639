package daemon

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
)

// logWarnings logs what validation found questionable, one line each.
func logWarnings(log *zap.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		log.Warn("configuration warning", zap.String("warning", w.Error()), zap.String("file", w.File), zap.Int("line", w.Line))
	}
}

// startupLog is what the daemon says once it serves: the target's identity and ports, the ALUA
// groups, each LUN and ACL, the addresses it listens on and the lines an initiator logs in with.
type startupLog struct {
	log        *zap.Logger
	cfg        *config.Config
	ident      Identity
	alua       *scsi.ALUA
	luns       map[int]*lunState
	auth       *aclAuthorizer
	listeners  map[listenAddr]*listenerState
	interfaces InterfacesFunc
	devices    DevicesFunc
}

func (d startupLog) write() {
	d.log.Info("target identity", zap.String("id_ext", fmt.Sprintf("%016x", d.ident.idExt)),
		zap.String("ioc_guid", fmt.Sprintf("%016x", d.ident.iocGUID)), zap.String("from", d.ident.from),
		zap.Uint16("relative_port", d.cfg.Target.RelativePortID))
	for _, p := range d.cfg.Target.Ports {
		id := PortIdentity(p, d.ident)
		d.log.Info("more target port", zap.String("id_ext", fmt.Sprintf("%016x", id.idExt)),
			zap.String("ioc_guid", fmt.Sprintf("%016x", id.iocGUID)), zap.Uint16("relative_port", p.RelativePortID))
	}
	logPortGroups(d.log, d.alua)
	nums := make([]int, 0, len(d.luns))
	for n := range d.luns {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	for _, n := range nums {
		logLUN(d.log, d.luns[n])
	}
	logACLs(d.log, d.auth)
	addrs := make([]listenAddr, 0, len(d.listeners))
	for ap := range d.listeners {
		addrs = append(addrs, ap)
	}
	slices.SortFunc(addrs, listenAddr.compare)
	for _, ap := range addrs {
		d.log.Info("listening", zap.Stringer("address", ap))
	}
	for _, l := range addTargetLines(d.cfg, d.ident, d.interfaces) {
		fields := []zap.Field{zap.String("add_target", l.command(d.ident))}
		if l.note != "" {
			fields = append(fields, zap.String("note", l.note))
		}
		d.log.Info("initiator login (on the initiator, as root)", fields...)
	}
	for _, l := range ibTargetLines(d.cfg, d.devices) {
		d.log.Info("initiator login over native InfiniBand (on the initiator, as root)",
			zap.String("add_target", l.command(d.ident)), zap.String("note", l.note))
	}
}

// logLUN logs one logical unit as it serves.
func logLUN(log *zap.Logger, st *lunState) {
	fields := []zap.Field{
		zap.Int("lun", st.num),
		zap.String("backstore", string(st.cfg.Backstore)),
		zap.Stringer("size", config.Size(st.lu.Blocks()*uint64(st.lu.BlockSize()))),
		zap.Uint32("block_size", st.lu.BlockSize()),
	}
	if st.cfg.Path != "" {
		fields = append(fields, zap.String("path", st.cfg.Path))
	}
	if st.cfg.RBD != nil {
		fields = append(fields, zap.String("image", st.cfg.RBD.ImageName()))
	}
	fields = append(fields,
		zap.String("serial", st.key.serial),
		zap.Bool("read_only", st.key.readOnly),
		zap.Bool("write_cache", st.key.writeCache),
		zap.Bool("thin_provisioning", st.key.thin))
	log.Info("LUN", fields...)
}

// logACLs logs the ACLs of auth and the LUNs that none of them names.
func logACLs(log *zap.Logger, auth *aclAuthorizer) {
	if len(auth.acls) == 0 {
		log.Warn("no ACLs are configured: every login is refused")
	}
	seen := map[int]bool{}
	for _, e := range auth.acls {
		fields := []zap.Field{zap.String("acl", fmt.Sprintf("acls[%d]", e.index))}
		if e.cfg.Name != "" {
			fields = append(fields, zap.String("name", e.cfg.Name))
		}
		if len(e.cfg.Initiators) > 0 {
			fields = append(fields, zap.Strings("initiators", e.cfg.Initiators))
		}
		if len(e.cfg.Sources) > 0 {
			fields = append(fields, zap.Strings("sources", e.cfg.Sources))
		}
		fields = append(fields, zap.Ints("luns", e.cfg.LUNs), zap.Bool("read_only", e.cfg.ReadOnly))
		log.Info("ACL", fields...)
		for _, n := range e.cfg.LUNs {
			seen[n] = true
		}
	}
	for _, n := range auth.luns {
		if !seen[n] {
			log.Warn("LUN is in no ACL: no initiator sees it", zap.Int("lun", n))
		}
	}
}

// logPortGroups logs the ALUA target port groups in force.
func logPortGroups(log *zap.Logger, a *scsi.ALUA) {
	for _, g := range a.Groups() {
		log.Info("target port group", zap.Uint16("group", g.ID), zap.Stringer("state", g.State),
			zap.Bool("preferred", g.Preferred), zap.Uint16s("relative_ports", g.Ports))
	}
}
