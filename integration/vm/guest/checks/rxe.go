package checks

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"
)

// RXE is the soft-RoCE device the checks run over: rdma_rxe on a dummy netdev with a fixed
// MAC, so that its node GUID (and the target identifiers the daemon derives from it) is the
// same on every boot.
type RXE struct {
	Name   string // rxe0
	Netdev string // dummy0
	IP4    string // without the prefix length
	IP6    string
	GUID   string // node GUID, 16 hex digits
	GID4   int    // the GID table index of IP4
	GID6   int
}

// SetupRXE makes rxe0 on the netdev of the run's arguments (netdev=dummy0
// mac=02:00:00:00:00:01 ip4=169.254.50.1/16 ip6=fd53:5250::1/64). The IPv6 address is added
// with nodad: RDMA/CM cannot bind a tentative address.
func (l *Lab) SetupRXE() (*RXE, error) {
	r := &RXE{Name: "rxe0", Netdev: l.Arg("netdev", "dummy0")}
	mac := l.Arg("mac", "02:00:00:00:00:01")
	ip4, ip6 := l.Arg("ip4", "169.254.50.1/16"), l.Arg("ip6", "fd53:5250::1/64")
	r.IP4, _, _ = strings.Cut(ip4, "/")
	r.IP6, _, _ = strings.Cut(ip6, "/")
	steps := [][]string{
		{"modprobe", "rdma_rxe"}, {"modprobe", "ib_uverbs"}, {"modprobe", "rdma_ucm"},
	}
	if strings.HasPrefix(r.Netdev, "dummy") {
		// numdummies=0: else the module makes dummy0 itself
		steps = append(steps, []string{"modprobe", "dummy", "numdummies=0"})
		if _, err := os.Stat("/sys/class/net/" + r.Netdev); err != nil {
			steps = append(steps, []string{"ip", "link", "add", r.Netdev, "type", "dummy"})
		}
	}
	steps = append(steps,
		[]string{"ip", "link", "set", r.Netdev, "address", mac},
		[]string{"ip", "link", "set", r.Netdev, "up"},
		[]string{"ip", "addr", "add", ip4, "dev", r.Netdev},
		[]string{"ip", "-6", "addr", "add", ip6, "dev", r.Netdev, "nodad"},
		[]string{"rdma", "link", "add", r.Name, "type", "rxe", "netdev", r.Netdev},
	)
	for _, s := range steps {
		if o := l.Run(s[0], s[1:]...); !o.OK() {
			return nil, fmt.Errorf("%s: exit %d", strings.Join(s, " "), o.Code)
		}
	}
	l.Run("rdma", "link", "show", r.Name+"/1")
	if !WaitFor(10*time.Second, func() bool { return strings.Contains(r.port("state"), "ACTIVE") }) {
		return nil, fmt.Errorf("%s: port not active", r.Name)
	}
	r.GUID = strings.ReplaceAll(readTrim("/sys/class/infiniband/"+r.Name+"/node_guid"), ":", "")
	for _, a := range []struct {
		ip  string
		idx *int
	}{{r.IP4, &r.GID4}, {r.IP6, &r.GID6}} {
		gid, err := GIDOf(a.ip)
		if err != nil {
			return nil, err
		}
		if !WaitFor(10*time.Second, func() bool { *a.idx = r.GIDIndex(gid); return *a.idx >= 0 }) {
			return nil, fmt.Errorf("%s: no GID for %s", r.Name, a.ip)
		}
	}
	r.showGIDs(l)
	return r, nil
}

// MustRXE is SetupRXE for a check: without soft-RoCE the run cannot go on.
func (l *Lab) MustRXE(c *C) *RXE {
	r, err := l.SetupRXE()
	if err != nil {
		c.Abort("soft-RoCE setup (rdma_rxe on %s): %v", l.Arg("netdev", "dummy0"), err)
	}
	return r
}

func (r *RXE) port(attr string) string {
	return readTrim("/sys/class/infiniband/" + r.Name + "/ports/1/" + attr)
}

// GIDOf is the GID of an IP address in sysfs form (eight groups of four hex digits): an IPv4
// address mapped into IPv6, as RoCE v2 has it.
func GIDOf(ip string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", err
	}
	b := a.As16() // an IPv4 address as ::ffff:a.b.c.d
	h := hex.EncodeToString(b[:])
	var g []string
	for i := 0; i < len(h); i += 4 {
		g = append(g, h[i:i+4])
	}
	return strings.Join(g, ":"), nil
}

// GIDIndex is gid's index in port 1's GID table, -1 when it is not there.
func (r *RXE) GIDIndex(gid string) int {
	for i := range 16 {
		if r.port(fmt.Sprintf("gids/%d", i)) == gid {
			return i
		}
	}
	return -1
}

func (r *RXE) showGIDs(l *Lab) {
	for i := range 16 {
		g := r.port(fmt.Sprintf("gids/%d", i))
		if g == "" || g == "0000:0000:0000:0000:0000:0000:0000:0000" {
			continue
		}
		l.Printf("%s gid[%d] %s %s %s", r.Name, i, g, r.port(fmt.Sprintf("gid_attrs/types/%d", i)),
			r.port(fmt.Sprintf("gid_attrs/ndevs/%d", i)))
	}
}

var cmListen = regexp.MustCompile(`state LISTEN .*src-addr (\S+)`)

// CMListening says whether an RDMA/CM id listens on port (`rdma resource show cm_id`: the
// daemon's and the kernel's listeners alike).
func CMListening(port int) bool {
	return cmListeningIn(Quiet("rdma", "resource", "show", "cm_id").Text, port)
}

func cmListeningIn(out string, port int) bool {
	for _, line := range strings.Split(out, "\n") {
		m := cmListen.FindStringSubmatch(line)
		if m != nil && strings.HasSuffix(m[1], fmt.Sprintf(":%d", port)) {
			return true
		}
	}
	return false
}
