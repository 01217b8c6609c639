package srp

import "time"

// busyLogEvery is how often a channel may log that it answered BUSY for want of a buffer.
const busyLogEvery = 10 * time.Second

// clockEvery is how many idle passes of an adaptive group go by between clock reads.
const clockEvery = 32

// manualClock is the clock of scripted tests: it moves only when the script says.
type manualClock struct{ now time.Time }

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()
