package srp

// execute hands c to a worker: a command of a logical unit that may block.
func (g *pollGroup) execute(c *cmdCtx) {
	if g.script {
		g.scriptWork = append(g.scriptWork, c)
		return
	}
	queued := g.queued.Add(1)
	if len(g.workQ) > 0 {
		g.workQ = append(g.workQ, c)
	} else {
		select {
		case g.work.ch <- c:
		default:
			g.workQ = append(g.workQ, c)
		}
	}
	// One more worker when the idle ones will not take all that waits: each may block in
	// its logical unit as long as it likes.
	if g.work.idle.Load() < queued && g.workers < g.t.lim.WorkersPerChannel*max(int(g.load.Load()), 1) {
		g.workers++
		go g.worker(g.work)
	}
}

// feedWorkers moves what waits in workQ to the work channel as room allows.
func (g *pollGroup) feedWorkers() {
	for len(g.workQ) > 0 {
		select {
		case g.work.ch <- g.workQ[0]:
			g.workQ[0] = nil
			g.workQ = g.workQ[1:]
		default:
			return
		}
	}
}

func newWorkSet() *workSet { return &workSet{ch: make(chan *cmdCtx, workQueue)} }

// worker runs commands in their logical units, taken from ws until it is closed.
func (g *pollGroup) worker(ws *workSet) {
	for {
		ws.idle.Add(1)
		c, ok := <-ws.ch
		ws.idle.Add(-1)
		if !ok {
			return
		}
		g.queued.Add(-1)
		if c.state() == ctxCmd && !c.ch.closing.Load() {
			c.lunMap.Continue(&c.cmd) // Execute, or the rest of what groupIO started
		} else {
			c.lunMap.Abandon(&c.cmd)
		}
		g.handBack(c)
	}
}

// stopWorkers ends the workers (the group's channels are gone, so none holds a command).
func (g *pollGroup) stopWorkers() {
	close(g.work.ch)
}

// retireWorkers ends the workers once the group has no channel left, so that an idle daemon
// keeps none (the next command starts them again); group goroutine. No worker holds a command
// then: a closing channel waits for the contexts it handed off.
func (g *pollGroup) retireWorkers() {
	if g.workers == 0 || len(g.workQ) > 0 {
		return
	}
	close(g.work.ch)
	g.work = newWorkSet()
	g.workers = 0
}
