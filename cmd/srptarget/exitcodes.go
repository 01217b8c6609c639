package main

// The exit statuses of srptarget's commands, for scripts and monitoring (README.md,
// "Operating"; each command's help). A second signal to serve exits 128 + its number.
const (
	// exitOK: done; for status, the daemon serves (a listener listens).
	exitOK = 0
	// exitFailed: the command failed or was refused: a configuration with errors (validate,
	// reload, serve's start), an initiator no ACL admits (acl-check), a bad flag.
	exitFailed = 1
	// exitUnreachable: no daemon answers on the control socket (not running, another
	// --control, or no permission to open it).
	exitUnreachable = 3
	// exitNotServing: status: the daemon runs but serves nothing yet: every listener waits
	// for an RDMA device with its address.
	exitNotServing = 4
)
