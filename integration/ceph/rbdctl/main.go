// Command rbdctl does the few cluster chores of the RBD tests where the ceph tool (Python) is
// not at hand, as in the test VM: it speaks to the cluster through librados and librbd (package
// backstore/rbd), configured by $CEPH_CONF. Built without the build tag rbd, it only says so.
//
//	rbdctl mon '{"prefix": "osd new", "uuid": "..."}'   # a monitor command; prints its output
//	rbdctl pool-create NAME                             # a pool, tagged for rbd
//	rbdctl create POOL IMAGE BYTES                      # an image
//	rbdctl resize POOL IMAGE BYTES                      # a resize, online
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/srptarget/srptarget/backstore/rbd"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rbdctl:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: rbdctl mon JSON | pool-create NAME | create POOL IMAGE BYTES | resize POOL IMAGE BYTES")
	}
	conn, err := rbd.Connect(rbd.Options{ConfFile: os.Getenv("CEPH_CONF"), MountTimeout: 60 * time.Second, OSDOpTimeout: 120 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	size := func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
	switch {
	case args[0] == "mon" && len(args) == 2:
		out, err := conn.MonCommand(args[1])
		if out != "" {
			fmt.Println(out)
		}
		return err
	case args[0] == "pool-create" && len(args) == 2:
		if err := conn.PoolCreate(args[1]); err != nil {
			return err
		}
		_, err := conn.MonCommand(fmt.Sprintf(`{"prefix": "osd pool application enable", "pool": %q, "app": "rbd"}`, args[1]))
		return err
	case (args[0] == "create" || args[0] == "resize") && len(args) == 4:
		n, err := size(args[3])
		if err != nil {
			return err
		}
		if args[0] == "create" {
			return conn.CreateImage(args[1], "", args[2], n)
		}
		img, err := conn.OpenImage(args[1], "", args[2], false, 1)
		if err != nil {
			return err
		}
		defer img.Close()
		return img.Resize(n)
	}
	return fmt.Errorf("unknown command %q (or wrong number of arguments)", args)
}
