package runner

import (
	"sync"
	"time"
)

// yieldGate holds background work back while large cancellations run.
//
// A stop's kill, reap and record are on the critical path of its answer,
// and while a few hundred killed processes exit, they fill the cores: every
// CPU second spent beside them delays the answer by about half a second on
// two cores. The agent filesystem's writer (rewriting each stopped agent's
// session state and its status in its parent's session) and the removal of
// the stopped groups (two rmdirs per agent) were about two fifths of the
// daemon's CPU between the first Stop of 1,000 agents and its answer
// (issue 22, session 18). They are not part of what a stop answers for: the writer
// lags behind the store anyway (and waits for nobody who waits for the
// tree: kin wait), and a group's removal is invisible to agents. So each
// cancellation of largeCancel agents or more that kills at once (no
// grace: one with a grace leaves the cores idle mostly while it waits)
// holds the gate from its plan's end to its answer (or until it waits for
// other hosts of the fleet to stop theirs), and that work waits
// for the gate to be free, never longer than yieldMax at a time.
type yieldGate struct {
	mu    sync.Mutex
	held  int
	free  chan struct{} // closed when held drops to 0; nil while nothing holds it
	after []func()      // afterFree's, run once nothing holds it (or yieldMax after the first)
	flush *time.Timer   // runs after at yieldMax
	armed uint64        // which flush may take after: a stopped one's callback may run late
}

// yieldMax bounds how long background work waits for the gate at a time,
// so that a stream of large stops does not hold it back for good (a
// variable for tests).
var yieldMax = 2 * time.Second

// hold holds the gate until release is called (more than once is fine).
func (g *yieldGate) hold() (release func()) {
	g.mu.Lock()
	if g.held == 0 {
		g.free = make(chan struct{})
	}
	g.held++
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(g.release) }
}

func (g *yieldGate) release() {
	g.mu.Lock()
	g.held--
	if g.held > 0 {
		g.mu.Unlock()
		return
	}
	close(g.free)
	g.free = nil
	after := g.takeLocked()
	g.mu.Unlock()
	runInOrder(after)
}

// takeLocked takes the work afterFree queued, stopping its flush.
func (g *yieldGate) takeLocked() []func() {
	after := g.after
	g.after = nil
	if g.flush != nil {
		g.flush.Stop()
		g.flush = nil
	}
	g.armed++ // a flush that fires now finds nothing of its own to run
	return after
}

// runInOrder runs fns one after the other on a goroutine of their own.
func runInOrder(fns []func()) {
	if len(fns) == 0 {
		return
	}
	go func() {
		for _, fn := range fns {
			fn()
		}
	}()
}

// waitFree returns a channel closed once nothing holds the gate, or nil
// when nothing holds it now.
func (g *yieldGate) waitFree() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.free
}

// afterFree runs fn once nothing holds the gate, on a goroutine of its own
// (one for all the work queued meanwhile, in order), but no later than
// yieldMax after the first work queued; now, on the caller's goroutine,
// when nothing holds the gate.
func (g *yieldGate) afterFree(fn func()) {
	g.mu.Lock()
	if g.held == 0 {
		g.mu.Unlock()
		fn()
		return
	}
	g.after = append(g.after, fn)
	if g.flush == nil {
		armed := g.armed
		g.flush = time.AfterFunc(yieldMax, func() {
			g.mu.Lock()
			var after []func()
			if g.armed == armed { // else taken already, and what is queued now is a later flush's
				after = g.takeLocked()
			}
			g.mu.Unlock()
			runInOrder(after)
		})
	}
	g.mu.Unlock()
}
