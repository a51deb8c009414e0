package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// ctxWriter keeps the agent filesystem following the store. The store is
// the record; every change to an agent is committed with an event, so the
// writer follows the event log: for each batch of new events it rewrites
// the control files of the agents they name (ctxfs skips files already
// right), sets their sessions' state, appends the events to their
// events.jsonl, and writes their status in their parents' sessions. Then
// it records the last event applied in <ctx>/.kin-synced, so that after a
// crash a new daemon resumes where this one stopped; events.jsonl is not
// appended twice (the last seq in the file is read back first).
//
// Writing in the background keeps the control directory (some 20 new
// files per agent) and the rewrites of each change out of the spawn and the
// cascade; Wait waits for the writer, so `kin wait` returns with the files
// up to date.
// recordEvery bounds how many events may pass without the progress file
// being rewritten.
const recordEvery = 1024

type ctxWriter struct {
	d *Runner

	mu      sync.Mutex
	applied int64                // the last event applied
	advance chan struct{}        // closed and replaced when applied moves
	touched map[kin.AgentID]bool // changed without an event (heartbeats)
	kick    chan struct{}        // one value when touched gains an agent: no commit with events wakes the writer for it
	hurry   chan struct{}        // one value when someone waits for the tree (waitApplied): no settling
	waiting int                  // waitApplied calls in progress: the writer does not yield (yieldToStops)
	// recorded is the last event seq written to the progress file, kept
	// open as progress (only the writer's goroutine uses them).
	recorded int64
	progress *os.File

	// rebuild: the tree is being rebuilt after a crash of the machine
	// (checkBoot): every agent's session files are repaired once
	// (repairCtx), until the writer has caught up. Writer's goroutine only.
	rebuild  bool
	repaired map[kin.AgentID]bool

	pausec   chan struct{} // closed at the daemon's shutdown: stop applying until stop
	paused   bool
	stopc    chan struct{}
	done     chan struct{}
	deadline time.Time // at stop: stop applying then; the next daemon resumes
}

// shutdownDrain bounds what a clean shutdown spends bringing the tree up
// to date once its agents are stopped (stopping 2,000 agents rewrites some
// 10,000 files, and the writer may still be behind on their spawns); what
// is left is applied by the next daemon, from .kin-synced. A few agents'
// changes take milliseconds; 2,000 agents' ends (each session's state and
// events.jsonl) take longer than any bound worth waiting for, and the
// shutdown of 2,000 agents has a second in all (issue 22).
const shutdownDrain = 100 * time.Millisecond

// syncedFile holds the last event the tree reflects.
const syncedFile = ".kin-synced"

// ctxBatch is how many events one pass reads.
const ctxBatch = 1000

func newCtxWriter(run *Runner) *ctxWriter {
	w := blankCtxWriter(run)
	if b, err := run.ctx.ReadFile(filepath.Join(run.ctx.Root, syncedFile), 64); err == nil {
		w.applied, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	w.checkBoot()
	return w
}

// blankCtxWriter is a writer for run at event 0, before newCtxWriter
// reads where the tree got to and checks the boot.
func blankCtxWriter(run *Runner) *ctxWriter {
	return &ctxWriter{
		d: run, advance: make(chan struct{}), touched: map[kin.AgentID]bool{}, kick: make(chan struct{}, 1),
		hurry: make(chan struct{}, 1), pausec: make(chan struct{}), stopc: make(chan struct{}), done: make(chan struct{}),
	}
}

// bootFile, in the daemon's home (outside the tree, whose every entry
// agents and tools know), holds the boot id of the machine the tree was
// last written on.
const bootFile = "ctx-boot"

// bootIDPath is where Linux gives the boot id: a variable for tests.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// checkBoot rebuilds the whole tree from the store (from event 0) when it
// was last written during another boot of the machine: kin does not sync
// the tree's files one by one, so a crash of the machine may have left
// some empty or old. Where the boot id cannot be read, it rebuilds every
// time. Rewriting what is already right costs a read of each file.
func (w *ctxWriter) checkBoot() {
	run := w.d
	id, err := os.ReadFile(bootIDPath)
	boot := strings.TrimSpace(string(id))
	if err != nil || boot == "" {
		boot = "unknown"
	}
	path := filepath.Join(run.cfg.Home, bootFile)
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == boot && boot != "unknown" {
		return
	}
	own := ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
	if w.applied > 0 || err == nil {
		w.rebuild, w.repaired = true, map[kin.AgentID]bool{}
	}
	if w.applied > 0 {
		run.log.Info("agent filesystem: the machine restarted since it was last written: rebuilding it from the store", "was_at_event", w.applied)
		w.applied = 0
		if err := run.ctx.WriteFile(filepath.Join(run.ctx.Root, syncedFile), []byte("0\n"), own, 0o600); err != nil {
			run.log.Error("agent filesystem: record progress", "err", err)
		}
	}
	if err := writeFileAtomic(path, []byte(boot+"\n")); err != nil {
		run.log.Error("agent filesystem: record the boot", "err", err)
	}
}

// record writes seq to the progress file, in place: a fixed-width number
// (zero-padded: as wide as any earlier content) over the last, one
// pwrite into a file kept open, where a new file renamed over the old one
// for every batch cost an inode, and the churn of freed inodes in the
// ctx root. A crash of the daemon leaves one or the other number (the
// write is one call into the page cache); a crash of the machine is
// checkBoot's, which rebuilds from event 0 whatever the file says.
func (w *ctxWriter) record(seq int64) error {
	if w.progress == nil {
		f, err := os.OpenFile(filepath.Join(w.d.ctx.Root, syncedFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		w.progress = f
	}
	_, err := w.progress.WriteAt(fmt.Appendf(nil, "%020d\n", seq), 0)
	return err
}

// lazyTypes are the events the writer applies within lazyEvery rather
// than at once: a model call's event comes with every call an agent makes
// through the gateway (hundreds a second), and nobody waits for it in an
// agent's events.jsonl (kin wait hurries the writer: waitApplied).
var lazyTypes = []string{kin.EventModelCall}

// lazyEvery bounds how long a lazy event waits for the writer.
const lazyEvery = time.Second

// settleFor is how long the writer lets a commit settle before it applies
// it, unless someone waits for the tree (waitApplied hurries it). A spawn
// commits its pid's record just before it answers; a writer woken at once
// takes a core from that answer (the client's read, on a machine whose
// other core runs the new agent's exec). Measured on 2 cores (issue 22,
// session 16): the answer's way from the handler's write to the client
// 0.57-0.61 ms at the p50 without, 0.26-0.32 ms with 3 ms; a spawn's
// p50 over its floor 1.36-1.51x without, 1.32-1.39x with (three pairs);
// no change a burst of spawns could show (10 ms did no better).
var settleFor = 3 * time.Millisecond

// settling and idle, when not nil, are called as the writer starts to
// settle and as it starts to wait for a commit (a test's hooks).
var settling, idle func()

func (w *ctxWriter) run() {
	defer close(w.done)
	defer func() {
		if w.progress != nil {
			w.progress.Close()
		}
	}()
	changed := store.WaitFor(w.d.store, lazyTypes, true)
	lazy := store.WaitFor(w.d.store, lazyTypes, false)
	for {
		wake, lz := changed(), lazy()
		// A hurry sent before this pass is answered by it: the seq its
		// waiter wants was committed before it was sent.
		select {
		case <-w.hurry:
		default:
		}
		w.sync()
		var later <-chan time.Time
		var timer *time.Timer
		settle := true
		if idle != nil {
			idle()
		}
	wait:
		for {
			select {
			case <-wake:
				break wait
			case <-w.kick:
				break wait
			case <-w.hurry:
				settle = false
				break wait
			case <-lz:
				lz, timer = nil, time.NewTimer(lazyEvery)
				later = timer.C
			case <-later:
				break wait
			case <-w.pausec:
				<-w.stopc
				w.sync()
				return
			case <-w.stopc:
				w.sync()
				return
			}
		}
		if timer != nil {
			timer.Stop()
		}
		if settle {
			w.settle()
		}
	}
}

// settle waits settleFor, or less if someone waits for the tree (the
// hurry is taken here) or the daemon pauses or stops it (the pass that
// follows stops at its first agent while paused, or within the stop's
// deadline, as any pass does).
func (w *ctxWriter) settle() {
	if settling != nil {
		settling()
	}
	t := time.NewTimer(settleFor)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.hurry:
	case <-w.pausec:
	case <-w.stopc:
	}
}

// pause stops the writer between two agents' files until stop: while a
// shutdown stops the agents, the cancellation has the CPU (the writer may
// be seconds behind on a burst of spawns).
func (w *ctxWriter) pause() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.paused {
		w.paused = true
		close(w.pausec)
	}
}

// stop applies what is left within shutdownDrain and ends the writer.
func (w *ctxWriter) stop() {
	w.mu.Lock()
	w.deadline = time.Now().Add(shutdownDrain)
	w.mu.Unlock()
	close(w.stopc)
	<-w.done
}

// touch marks agents whose row changed without an event.
func (w *ctxWriter) touch(ids ...kin.AgentID) {
	w.mu.Lock()
	for _, id := range ids {
		w.touched[id] = true
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// waitApplied returns once the tree reflects event seq, or ctx is done.
func (w *ctxWriter) waitApplied(ctx context.Context, seq int64) error {
	w.mu.Lock()
	w.waiting++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiting--
		w.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		ok, ch := w.applied >= seq, w.advance
		w.mu.Unlock()
		if ok {
			return nil
		}
		// A lazy event (lazyTypes) does not wake the writer at once, and
		// a woken one settles first (settleFor): hurry it, again each
		// time the tree advances short of seq (a pass of ctxBatch events).
		select {
		case w.hurry <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-w.pausec: // the daemon's shutdown: it does not catch up before stop
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		case <-w.done:
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		}
	}
}

// sync applies every event not yet applied, batch by batch.
func (w *ctxWriter) sync() {
	ctx := context.Background()
	yieldUntil := time.Now().Add(yieldMax)
	for {
		w.mu.Lock()
		since := w.applied
		touched := w.touched
		w.touched = map[kin.AgentID]bool{}
		w.mu.Unlock()
		evs, err := w.d.store.EventList(ctx, kin.EventFilter{Since: since, Limit: ctxBatch})
		if err != nil {
			w.d.log.Error("agent filesystem: read events", "err", err)
			return
		}
		if len(evs) == 0 && len(touched) == 0 {
			if w.rebuild {
				w.rebuild, w.repaired = false, nil
				w.d.log.Info("agent filesystem: rebuilt from the store")
			}
			return
		}
		w.yieldToStops(&yieldUntil)
		byAgent := map[kin.AgentID][]kin.Event{}
		var ids []kin.AgentID
		for _, ev := range evs {
			// Identity events (aauth.*) change nothing in an agent's files
			// and can come by the thousand a second: the store keeps them,
			// the sessions' events.jsonl does not.
			if ev.Agent == 0 || strings.HasPrefix(ev.Type, "aauth.") {
				continue
			}
			if _, seen := byAgent[ev.Agent]; !seen {
				ids = append(ids, ev.Agent)
			}
			byAgent[ev.Agent] = append(byAgent[ev.Agent], ev)
		}
		named := len(ids) > 0 || len(touched) > 0
		ids = w.justRegistered(ids, evs, byAgent, touched)
		for id := range touched {
			if _, seen := byAgent[id]; !seen {
				byAgent[id] = nil
				ids = append(ids, id)
			}
		}
		agents, err := w.d.store.AgentListByIDs(ctx, ids)
		if err != nil {
			w.d.log.Error("agent filesystem: read agents", "err", err)
			return
		}
		known := w.d.parentsOf(ctx, agents)
		for _, a := range agents {
			w.yieldToStops(&yieldUntil)
			w.mu.Lock()
			deadline, paused := w.deadline, w.paused
			w.mu.Unlock()
			if paused && deadline.IsZero() {
				return // until stop
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				w.d.log.Info("agent filesystem: left for the next start", "from_event", since)
				return
			}
			if !w.d.ownsAgent(a) {
				// Another host of the fleet keeps its agents' files; a
				// child of one of this host's agents has its folder here.
				w.d.remoteChild(ctx, a)
				continue
			}
			w.apply(ctx, a, byAgent[a.ID], known)
		}
		if len(evs) > 0 {
			last := evs[len(evs)-1].Seq
			// A batch that touched no agent's files (identity events only)
			// need not be recorded at once: a restart replays it for nothing.
			if named || last-w.recorded >= recordEvery {
				w.recorded = last
				if err := w.record(last); err != nil {
					w.d.log.Error("agent filesystem: record progress", "err", err)
				}
			}
			w.mu.Lock()
			w.applied = last
			close(w.advance)
			w.advance = make(chan struct{})
			w.mu.Unlock()
		}
	}
}

// yieldToStops waits while a large cancellation runs (Runner.yield), but
// not past *until (the pass's bound, yieldMax from its start), nor while
// someone waits for the tree (waitApplied, whose hurry also ends the
// wait), nor once the daemon pauses or stops the writer (the pass then
// ends at its next agent, as it always did). A wait cut short by a waiter
// ends the pass's yielding: *until is cleared.
func (w *ctxWriter) yieldToStops(until *time.Time) {
	free := w.d.yield.waitFree()
	if free == nil || until.IsZero() {
		return
	}
	w.mu.Lock()
	waited := w.waiting > 0
	w.mu.Unlock()
	left := time.Until(*until)
	if waited || left <= 0 {
		*until = time.Time{}
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-free:
	case <-t.C:
		*until = time.Time{}
	case <-w.hurry:
		*until = time.Time{}
	case <-w.pausec:
	case <-w.stopc:
	}
}

// justRegistered applies, and leaves out of ids, the agents whose only
// events in the batch are their registration's (agent.registered, with
// agent.child.spawned) and whose files the writer has not met yet: a
// registered agent has no session until its start (which makes it, with
// the events before it), its control files are served, and all the
// writer does for it is learn its name, which the event holds. Their rows,
// their parents' rows and a ctxAgent each were read and kept for that
// (a tenth of a registration's CPU through the API, and a ctxAgent per
// registered agent in memory; issue 22). Only where the store tells the
// events this daemon appended (store.AppendedHere), and never for the
// agent a full batch of evs ends on, whose commit may go on in the next
// batch: another host's agent placed by this one is known by its
// spawn.placed, or by its row. The rest of ids is returned.
func (w *ctxWriter) justRegistered(ids []kin.AgentID, evs []kin.Event, byAgent map[kin.AgentID][]kin.Event, touched map[kin.AgentID]bool) []kin.AgentID {
	run := w.d
	here, ok := run.store.(store.AppendedHere)
	if !ok || run.ctlSrc == nil || w.rebuild {
		return ids // control files on disk, or a tree to repair: the whole row
	}
	// A full batch may end inside a commit: its last agent's events may go
	// on in the next batch (a placed agent's spawn.placed).
	var cut kin.AgentID
	if len(evs) == ctxBatch {
		for i := len(evs) - 1; i >= 0 && cut == 0; i-- {
			cut = evs[i].Agent
		}
	}
	rest := ids[:0]
	for _, id := range ids {
		if id == cut || touched[id] {
			rest = append(rest, id)
			continue
		}
		if name, ok := registeredOnly(byAgent[id], here); ok && !run.hasCtxAgent(id) {
			run.names.remember(name, id)
			continue
		}
		rest = append(rest, id)
	}
	return rest
}

// registeredOnly returns the name agent.registered gives when evs are an
// agent's registration's events only, appended by this daemon (here): an
// agent another host of the fleet registered is that host's, or has its
// folder here (remoteChild), which its row says. One placed on another
// host has spawn.placed among them.
func registeredOnly(evs []kin.Event, here store.AppendedHere) (string, bool) {
	name := ""
	for _, ev := range evs {
		switch ev.Type {
		case kin.EventAgentRegistered:
			if !here.AppendedHere(ev.Seq) {
				return "", false
			}
			var d kin.AgentRegisteredData
			if err := json.Unmarshal(ev.Data, &d); err != nil || d.Name == "" {
				return "", false
			}
			name = d.Name
		case kin.EventChildSpawned:
		default:
			return "", false
		}
	}
	return name, name != ""
}

// hasCtxAgent reports whether the agent filesystem's record of id is in
// memory (started by this daemon, or met by the writer).
func (run *Runner) hasCtxAgent(id kin.AgentID) bool {
	run.ctxMu.Lock()
	defer run.ctxMu.Unlock()
	return run.ctxAgents[id] != nil
}

// apply brings one agent's files up to date.
func (w *ctxWriter) apply(ctx context.Context, a *kin.Agent, evs []kin.Event, known map[kin.AgentID]*kin.Agent) {
	run := w.d
	c := run.ctxAgentWith(ctx, a, known)
	if w.rebuild && !w.repaired[a.ID] {
		w.repaired[a.ID] = true
		run.repairCtx(ctx, a, c)
	}
	if run.ctlSrc != nil {
		run.names.remember(a.Name, a.ID) // served: read from the store when opened (ctxserve.go)
	} else if err := run.writeControl(a, c); err != nil {
		run.log.Warn("agent filesystem: control files", "agent", a.ID, "err", err)
	}
	if c.session.Agent != "" {
		if a.State != c.state && a.State.Valid() {
			if err := run.ctx.SetSessionState(c.session, a.State, run.now()); err != nil {
				run.log.Warn("agent filesystem: session state", "agent", a.ID, "err", err)
			} else {
				c.state = a.State
			}
		}
		if len(evs) > 0 {
			w.appendEvents(a, c, evs)
		}
	}
	w.appendMessages(a, c, evs)
	run.ctxMu.Lock()
	stale := a.Result != "" && a.Result != c.childStatus
	run.ctxMu.Unlock()
	if stale {
		run.setChildStatus(c, a.Result)
	}
}

// appendEvents appends to the agent's events.jsonl the events it does not
// hold yet.
func (w *ctxWriter) appendEvents(a *kin.Agent, c *ctxAgent, evs []kin.Event) {
	run := w.d
	if !c.seqKnown {
		// The first append since this daemon started: the file says where
		// it stopped, and the store gives what came before this batch (an
		// agent is registered before its session exists; a crash may have
		// come between an append and the progress record).
		seq, err := run.ctx.LastEventSeq(c.session)
		if err != nil {
			run.log.Warn("agent filesystem: events.jsonl", "agent", a.ID, "err", err)
			return
		}
		c.lastSeq, c.seqKnown = seq, true
		if seq < evs[0].Seq {
			all, err := run.store.EventList(context.Background(), kin.EventFilter{Agent: a.ID, Since: seq})
			if err != nil {
				run.log.Warn("agent filesystem: events", "agent", a.ID, "err", err)
				return
			}
			upTo := evs[len(evs)-1].Seq
			evs = evs[:0:0]
			for _, ev := range all {
				if ev.Agent == a.ID && ev.Seq <= upTo {
					evs = append(evs, ev)
				}
			}
		}
	}
	var lines [][]byte
	last := c.lastSeq
	for _, ev := range evs {
		if ev.Seq <= c.lastSeq {
			continue
		}
		b, err := kin.Marshal(ev) // '<' stays one byte, as in kin.db
		if err != nil {
			run.log.Warn("agent filesystem: event", "seq", ev.Seq, "err", err)
			continue
		}
		lines, last = append(lines, b), ev.Seq
	}
	if len(lines) == 0 {
		return
	}
	if err := run.ctx.AppendEvents(c.session, lines); err != nil {
		run.log.Warn("agent filesystem: events.jsonl", "agent", a.ID, "err", err)
		return
	}
	c.lastSeq = last
}

// holdsName reports whether a is the agent agent/<name> should describe:
// no later agent of that name has taken it (names are unique among live
// agents only, and an ended agent's files stay until its name is reused).
func (run *Runner) holdsName(a *kin.Agent) bool {
	id, ok := run.names.latest(a.Name)
	if !ok {
		b, err := run.ctx.ReadFile(run.ctx.AgentFile(a.Name), 64)
		if err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			id = kin.AgentID(n)
		}
	}
	return id <= a.ID
}

// writeControl writes a's control files to disk (not served), unless a
// later agent holds its name. The spawn (holdControl) and the writer both
// write them: one at a time (ctxfs builds a new directory under one
// temporary name).
func (run *Runner) writeControl(a *kin.Agent, c *ctxAgent) error {
	run.ctlWriteMu.Lock()
	defer run.ctlWriteMu.Unlock()
	if !run.holdsName(a) {
		return nil
	}
	run.ctxMu.Lock()
	rt := run.runtime(c, a.ID)
	run.ctxMu.Unlock()
	v, err := ctxfs.ControlFor(a, rt)
	if err == nil {
		err = run.ctx.WriteControl(a.Name, v)
	}
	if err != nil {
		return err
	}
	run.names.remember(a.Name, a.ID)
	return nil
}

// appendMessages appends the messages sent to a through kin to the
// messages.jsonl of the session each names. A session that does not exist
// (an agent that never ran, or a key nobody made) gets nothing: the message
// stays in the event log, where kin inbox reads it.
func (w *ctxWriter) appendMessages(a *kin.Agent, c *ctxAgent, evs []kin.Event) {
	run := w.d
	type line struct {
		seq  int64
		data []byte
	}
	bySession := map[string][]line{}
	var order []string
	for _, ev := range evs {
		if ev.Type != kin.EventAgentMessage {
			continue
		}
		data, to, sid, ok := messageLine(ev)
		if !ok || to != a.ID {
			continue
		}
		if _, seen := bySession[sid]; !seen {
			order = append(order, sid)
		}
		bySession[sid] = append(bySession[sid], line{ev.Seq, data})
	}
	for _, sid := range order {
		s := ctxfs.Session{Owner: run.agentOwner(a.ID), Agent: a.Name, ID: sid}
		if c.msgSeq == nil {
			c.msgSeq = map[string]int64{}
		}
		done, known := c.msgSeq[sid]
		if !known {
			var err error
			if done, err = run.ctx.LastMessageSeq(s); err != nil {
				run.log.Warn("agent filesystem: messages.jsonl", "agent", a.ID, "session", sid, "err", err)
				continue
			}
		}
		var lines [][]byte
		msgs := bySession[sid]
		for _, l := range msgs {
			if l.seq > done {
				lines = append(lines, l.data)
			}
		}
		if err := run.ctx.AppendMessages(s, lines); err != nil {
			run.log.Warn("agent filesystem: messages.jsonl", "agent", a.ID, "session", sid, "err", err)
			continue
		}
		c.msgSeq[sid] = msgs[len(msgs)-1].seq
	}
}

// messageLine is a message as a line of messages.jsonl.
func messageLine(e kin.Event) ([]byte, kin.AgentID, string, bool) {
	var m kin.AgentMessageData
	if json.Unmarshal(e.Data, &m) != nil || m.To == 0 {
		return nil, 0, "", false
	}
	line, err := kin.Marshal(struct {
		Seq  int64  `json:"seq"`
		Time string `json:"time"`
		Role string `json:"role"`
		kin.AgentMessageData
	}{e.Seq, e.Time.UTC().Format(time.RFC3339Nano), sender(m.From), m})
	if err != nil {
		return nil, 0, "", false
	}
	return line, m.To, m.Session, true
}

// sender names who sent a message, as messages.jsonl's role.
func sender(id kin.AgentID) string {
	if id == 0 {
		return kin.Operator
	}
	return "agent:" + strconv.FormatInt(int64(id), 10)
}

// writeFileAtomic replaces path (0600) with data: a temporary file renamed
// over it.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
