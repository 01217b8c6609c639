package srp

import (
	"sync/atomic"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// counters are the target's event counters, which Stats reports.
type counters struct {
	loginsAccepted, loginsRejected atomic.Uint64
	rejects                        [7]atomic.Uint64
	rejectedByACL                  atomic.Uint64
	channelsOpen                   atomic.Int64
	channelsClosed                 atomic.Uint64
	commands, taskMgmt, aborted    atomic.Uint64
	taskMgmtByFunc                 [len(TaskMgmtFuncs) + 1]atomic.Uint64
	bytesIn, bytesOut              atomic.Uint64
	transportErrors                atomic.Uint64
	protocolErrors, rdmaErrors     atomic.Uint64
	bufferWaits, bufferBusy        atomic.Uint64
	creditViolations               atomic.Uint64
	rdmaStalls, idleClosed         atomic.Uint64
	credReqs                       atomic.Uint64
	sendPosts, sendWRs             atomic.Uint64
}

// TaskManagementFunctions are the task management functions SRP carries (SRP r16a table 16): a
// logical unit served over SRP reports these in REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS
// (scsi.Config.TaskManagement). CLEAR ACA is carried but not supported by the logical unit.
const TaskManagementFunctions = scsi.TMFAbortTask | scsi.TMFAbortTaskSet | scsi.TMFClearTaskSet |
	scsi.TMFLogicalUnitRst | scsi.TMFClearACA

// TaskMgmtFuncs are the task management functions Stats.TaskMgmtByFunc counts one by one: those
// SRP r16a defines (table 16).
var TaskMgmtFuncs = [...]iu.TskMgmtFunc{iu.TskAbortTask, iu.TskAbortTaskSet, iu.TskClearTaskSet, iu.TskLUNReset, iu.TskClearACA}

// taskMgmtIndex is fn's index in TaskMgmtFuncs, or len(TaskMgmtFuncs) for another function.
func taskMgmtIndex(fn iu.TskMgmtFunc) int {
	for i, f := range TaskMgmtFuncs {
		if f == fn {
			return i
		}
	}
	return len(TaskMgmtFuncs)
}
