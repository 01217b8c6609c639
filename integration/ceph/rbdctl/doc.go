//go:build !rbd

// Command rbdctl needs the build tag rbd (main.go says what it does); built without it, it only
// says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "rbdctl: built without the build tag rbd (go build -tags rbd; needs librbd-dev and librados-dev)")
	os.Exit(2)
}
