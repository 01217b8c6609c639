package srp

import "time"

// Refused logins are logged per source address, and refused commands per channel, at most
// rejectLogBurst times per rejectLogEvery (lib/loglimit): enough to see what a
// misconfigured initiator is told on each of its retries, too few for a flood to flood the log.
const (
	rejectLogBurst = 5
	rejectLogEvery = 10 * time.Second
)
