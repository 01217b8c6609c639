package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/scsi"
)

// prFileName is the file under state_dir that keeps the persistent reservations of the logical
// unit with serial: it is named by the unit serial number, the identity that VPD page 0x83 and
// so the initiators' WWIDs are built from, so that the registrations follow the logical unit
// across restarts and reloads rather than a LUN number. Bytes other than letters, digits, '.',
// '_' and '-' are written %XX.
func prFileName(serial string) string {
	var b strings.Builder
	b.WriteString("pr-")
	for _, c := range []byte(serial) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteString(".json")
	return b.String()
}

// reservationsFor returns the reservations of the logical unit with serial, the same object
// for as long as the daemon runs (a reload that replaces the logical unit hands it to the new
// one), loaded at first from what APTPL saved under stateDir. A saved file that cannot be read
// or trusted is an error: starting without it would silently undo a cluster's fencing, and
// starting with one that someone else could have written would let them fence every
// initiator (readStateFile).
func (d *daemon) reservationsFor(stateDir, serial string) (*scsi.Reservations, error) {
	path := filepath.Join(stateDir, prFileName(serial))
	if r := d.prs[path]; r != nil {
		return r, nil
	}
	persist := func(data []byte) error {
		err := writeStateFile(path, data)
		if err != nil {
			d.log.Error("persistent reservations not saved: the change is refused", zap.String("path", path), zap.Error(err))
		}
		return err
	}
	data, err := readStateFile(path)
	var r *scsi.Reservations
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r = scsi.NewReservations(persist)
	case err != nil:
		return nil, fmt.Errorf("reading the persistent reservations: %w", err)
	default:
		if r, err = scsi.LoadReservations(data, persist); err != nil {
			return nil, fmt.Errorf("%s: %w (move the file away to start without them)", path, err)
		}
		regs, typ, _ := r.Registrations()
		d.log.Info("persistent reservations restored (APTPL)", zap.String("serial", serial),
			zap.String("path", path), zap.Int("registrations", len(regs)), zap.Uint8("type", typ))
	}
	if d.prs == nil {
		d.prs = make(map[string]*scsi.Reservations)
	}
	d.prs[path] = r
	return r, nil
}

// prMember names this gateway among those sharing an image's reservations: its primary target
// port, unique among the gateways of an image as each has its own (configs/README.md, "Two
// gateways").
func (d *daemon) prMember(cfg *config.Config) string {
	return fmt.Sprintf("%s-port%d", d.ident.portID(), cfg.Target.RelativePortID)
}

// PRTypeName names a persistent reservation type as SPC-4 table 212 does, as sg_persist prints it.
func PRTypeName(t uint8) string {
	switch t {
	case 0:
		return "none (registrations only)"
	case scsi.PRTypeWriteExclusive:
		return "Write Exclusive"
	case scsi.PRTypeExclusiveAccess:
		return "Exclusive Access"
	case scsi.PRTypeWriteExclusiveRegistrantsOnly:
		return "Write Exclusive, registrants only"
	case scsi.PRTypeExclusiveAccessRegistrantsOnly:
		return "Exclusive Access, registrants only"
	case scsi.PRTypeWriteExclusiveAllRegistrants:
		return "Write Exclusive, all registrants"
	case scsi.PRTypeExclusiveAccessAllRegistrants:
		return "Exclusive Access, all registrants"
	}
	return fmt.Sprintf("type %d", t)
}
