package scsi

import "sync/atomic"

// untrackedPath is the way around the task set's list (taskSet.enterUntracked) for commands
// that cannot wait long. It counts, in the low 32 bits of one word, the commands on the path,
// and above them what keeps new ones from it (ORDERED commands in the list, quiesceLocked
// calls): one word, so that a command's add tells it whether the path was open.
type untrackedPath struct {
	word atomic.Uint64
}

const (
	untrackedCmd    uint64 = 1
	untrackedCloser uint64 = 1 << 32
)

// close and open add and remove one reason to keep commands from the path; running reports
// how many still run there.
func (p *untrackedPath) close()          { p.word.Add(untrackedCloser) }
func (p *untrackedPath) open()           { p.word.Add(^(untrackedCloser - 1)) }
func (p *untrackedPath) running() uint32 { return uint32(p.word.Load()) }

// enter counts a command on the path and reports whether the path was open; a command that
// finds it closed leaves it again.
func (p *untrackedPath) enter() bool { return p.word.Add(untrackedCmd) < untrackedCloser }

// leave ends a command's count and reports whether it was the last one out of a closed path,
// which what closed the path may be waiting for.
func (p *untrackedPath) leave() (lastOfClosed bool) {
	v := p.word.Add(^(untrackedCmd - 1))
	return uint32(v) == 0 && v != 0
}
