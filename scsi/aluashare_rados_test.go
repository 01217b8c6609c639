//go:build rbd

package scsi

import (
	"testing"
)

// TestSTPGTwoGatewaysRADOS: SET TARGET PORT GROUPS through one of two device servers whose
// reservations (and with them the access states) live in RADOS: both report and enforce the
// new states, and the other's I_T nexuses have ASYMMETRIC ACCESS STATE CHANGED, when the
// command completes.
func TestSTPGTwoGatewaysRADOS(t *testing.T) {
	pool, conns := radosConns(t)
	testSTPGTwoGateways(t, func(t *testing.T) (m1, m2 *LUNMap, r2 *Reservations) {
		oid := radosOID(t)
		r1, _ := radosReservations(t, conns[0], pool, oid, "gw1", nil)
		r2, _ = radosReservations(t, conns[1], pool, oid, "gw2", nil)
		m1 = newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r1 }))
		m2 = newTestMap(t, newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r2 }))
		return m1, m2, r2
	}, false)
}
