package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/internal/agentsock"
	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/kin"
)

// Why an agent ended: kin.Agent.EndReason values.
const (
	reasonExited        = "exited"         // its process exited with status 0
	reasonCrashed       = "crashed"        // non-zero status or a signal
	reasonParentDead    = "parent_dead"    // seed 001: its owning parent ended
	reasonStopped       = "stopped"        // kin stop
	reasonTerminated    = "terminated"     // kin terminate of a running agent
	reasonOffline       = "offline"        // stopped to be replaced after going offline
	reasonShutdown      = "shutdown"       // the daemon shut down
	reasonLost          = "lost"           // it ended while the daemon was down
	reasonSuperseded    = "superseded"     // back from offline, its role's slot taken by a replacement
	reasonParentOffline = "parent_offline" // its owned parent's host died (profile host_loss cancel)
	reasonStartFail     = "start_failed"
	reasonPlaceFail     = "placement_failed" // its host did not start it (place.go)
)

// runtime is the daemon's record of a running agent process.
type runtime struct {
	id      kin.AgentID
	sock    *agentsock.Socket
	proc    *supervisor.Process // nil for an adopted process
	adopted bool
	grace   time.Duration // its grace, for a fence (which reads no store)
	ctx     *ctxAgent     // its place in the agent filesystem
	// ready is closed once the start is recorded (or failed), then, under
	// rtMu, replaced by the shared closedReady (markReady): a live agent
	// keeps no channel of its own (96 bytes, issue 22's memory). Read it
	// under rtMu.
	ready  chan struct{}
	ending bool // guarded by Daemon.rtMu: a stop or cancellation records the end
	exited bool // guarded by Daemon.rtMu: its process ended (its end may not be recorded yet)
}

// markExited marks the runtimes of agents whose processes are gone (a
// stop waited for their cgroups to empty) exited, as handleExit does.
func (run *Runner) markExited(agents []*kin.Agent) {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	for _, a := range agents {
		if rt := run.runtimes[a.ID]; rt != nil {
			rt.exited = true
		}
	}
}

// closedReady is every runtime's ready once closed (markReady).
var closedReady = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// markReady closes rt.ready (its start is recorded, or failed) and lets
// go of it: rt.ready is closedReady from then on.
func (run *Runner) markReady(rt *runtime) {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	close(rt.ready)
	rt.ready = closedReady
}

func (run *Runner) runtimeOf(id kin.AgentID) *runtime {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	return run.runtimes[id]
}

func (run *Runner) removeRuntime(id kin.AgentID) { run.dropRuntime(id, true) }

// dropRuntime is removeRuntime; without unlink, the agent's socket is shut
// but its file left (a shutdown removes them after every stop).
func (run *Runner) dropRuntime(id kin.AgentID, unlink bool) {
	run.rtMu.Lock()
	rt := run.runtimes[id]
	delete(run.runtimes, id)
	run.rtMu.Unlock()
	if rt != nil && rt.sock != nil {
		rt.sock.Shut()
		if unlink {
			rt.sock.Unlink()
		}
	}
	run.quota.Forget(id) // an ended agent sends nothing more
}

// Spawn registers an agent under the governor's rules and starts its
// process in its own cgroup, nested under its parent's.
func (run *Runner) Spawn(ctx context.Context, req kin.SpawnRequest) (*kin.Agent, error) {
	if err := run.refuseFenced(); err != nil {
		return nil, err
	}
	began := run.obs.TraceBegan()
	recorded, started, err := run.spawn(ctx, &req)
	if started != nil {
		recorded = started // with its pid
	}
	run.obs.Traced(ctx, SpawnKindSpawn, req.Parent, req.Name, recorded, began, err)
	return started, err
}

// spawn is Spawn: the agent once recorded (nil when the request was
// refused), and once its process started (nil when it did not).
func (run *Runner) spawn(ctx context.Context, req *kin.SpawnRequest) (recorded, started *kin.Agent, _ error) {
	if err := req.ValidateProcess(); err != nil {
		return nil, nil, err
	}
	if run.cfg.Models != nil {
		if err := run.cfg.Models.CheckEnv(req.Env); err != nil {
			return nil, nil, err
		}
	}
	if req.Name == "" {
		req.Name = defaultName(req.Command[0])
	}
	if err := run.socks.CheckPath(req.Name); err != nil {
		return nil, nil, err
	}
	grace := kin.Duration(kin.DefaultGrace)
	if req.Grace != nil {
		grace = *req.Grace
	}
	restart := req.Restart
	if restart == "" {
		restart = kin.RestartNever
	}
	var handoffJSON []byte
	if req.Handoff != nil {
		if _, err := parseHandoff(req.Handoff); err != nil {
			return nil, nil, err
		}
		var err error
		if handoffJSON, err = json.Marshal(req.Handoff); err != nil {
			return nil, nil, kin.Errorf(kin.ECodeInvalid, "handoff: %v", err)
		}
	}
	// The agent's key is made first and its row written in the
	// registration's transaction: one durable commit for both.
	pair, err := personserver.NewKeyPair()
	if err != nil {
		return nil, nil, fmt.Errorf("agent key: %w", err)
	}
	key := &agentKey{pem: pair.PEM}
	defer clear(pair.PEM) // the daemon keeps only the public key
	extra := &registry.SpawnExtra{Command: req.Command, Env: req.Env, Dir: req.Dir, Restart: restart, Grace: grace, Handoff: handoffJSON, Host: req.Host,
		InTx: func(ctx context.Context, tx store.Tx, a *kin.Agent) error {
			if !run.ownsAgent(a) {
				return nil // placed on another host, which makes its key as it starts it
			}
			row, err := run.ps.AgentKeyRow(ctx, tx, a, pair)
			if err == nil {
				err = tx.AgentKeyInsert(ctx, row)
			}
			key.row = row
			return err
		}}
	// Answered once visible: its start makes what needs no durability
	// while the registration reaches the disk, and waits for it before
	// the process runs (startWithKey).
	a, durable, err := run.reg.RegisterSpawnEarly(ctx, req.RegisterRequest, *extra)
	if err != nil {
		return nil, nil, err
	}
	key.durable = durable
	if !run.ownsAgent(a) {
		if err := durable(); err != nil {
			return a, nil, run.storeError(err)
		}
		out, err := run.awaitPlaced(context.WithoutCancel(ctx), a)
		return a, out, err
	}
	out, err := run.startWithKey(context.WithoutCancel(ctx), a, store.ProcessSpec{Command: req.Command, Env: req.Env, Dir: req.Dir, Handoff: handoffJSON}, "", key, false)
	return a, out, err
}

// agentKey is a key made and recorded with its agent's registration.
type agentKey struct {
	pem []byte
	row store.AgentKeyRow
	// durable waits until that registration is on the disk
	// (RegisterSpawnEarly); nil: it is.
	durable func() error
}

// defaultName makes a name from the command: its base name and a random
// suffix, within the name grammar.
func defaultName(command string) string {
	base := filepath.Base(command)
	var b strings.Builder
	for i := 0; i < len(base) && b.Len() < 40; i++ {
		c := base[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			b.WriteByte(c)
		} else if b.Len() > 0 && (c == '-' || c == '_' || c == '.') && i+1 < len(base) {
			b.WriteByte('-')
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if name == "" {
		name = "agent"
	}
	suffix := make([]byte, 3)
	rand.Read(suffix)
	return name + "-" + hex.EncodeToString(suffix)
}

// start runs a registered agent's process and records it. A process that
// cannot start leaves the agent recorded as failed.
func (run *Runner) start(ctx context.Context, a *kin.Agent, spec store.ProcessSpec, cursor string) (*kin.Agent, error) {
	return run.startWithKey(ctx, a, spec, cursor, nil, false)
}

// startWithKey is start for an agent whose key was recorded with it (key
// not nil), or start (nil: the key is made and recorded here). placed is
// an agent another host registered for this one (place.go): its start is
// recorded only if its spawner has not withdrawn it meanwhile.
func (run *Runner) startWithKey(ctx context.Context, a *kin.Agent, spec store.ProcessSpec, cursor string, key *agentKey, placed bool) (*kin.Agent, error) {
	// A child's group nests in its parent's, which a restarted daemon
	// may not have taken back yet.
	if err := run.awaitReconciled(ctx, a.Parent); err != nil {
		return nil, run.failStart(ctx, a, err)
	}
	rt := &runtime{id: a.ID, ready: make(chan struct{}), grace: time.Duration(a.Grace)}
	run.rtMu.Lock()
	if run.shuttingDown {
		run.rtMu.Unlock()
		return nil, run.failStart(ctx, a, errors.New("the daemon is shutting down"))
	}
	run.runtimes[a.ID] = rt
	run.rtMu.Unlock()
	defer run.markReady(rt)

	if err := run.checkAgentUID(a.ID); err != nil {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, err)
	}
	// The default view's ruleset is made beside the work below.
	view := run.startView(a)
	defer func() { view.discard() }() // a start that fails before sandboxArgv
	recorded := key != nil
	if !recorded {
		keyPEM, keyRow, err := run.ps.NewAgentKey(ctx, a)
		if err != nil {
			run.removeRuntime(a.ID)
			return nil, run.failStart(ctx, a, fmt.Errorf("agent key: %w", err))
		}
		defer clear(keyPEM) // the daemon keeps only the public key
		key = &agentKey{pem: keyPEM, row: keyRow}
	}
	keyRow := key.row
	// Its socket, the pipe kin drains into its log (bounded) and its
	// folders need nothing of each other (the socket's path is its
	// name's): made side by side.
	var (
		sock            *agentsock.Socket
		logOut          *os.File // the process's output
		sockErr, logErr error
		made            sync.WaitGroup
	)
	made.Go(func() { sock, sockErr = run.listen(a) })
	made.Go(func() { logOut, logErr = run.openLog(a.ID) })
	cx, ctxEnv, dir, err := run.prepareCtx(ctx, a, spec, run.socks.Path(a.Name), key.pem)
	made.Wait()
	rt.sock = sock
	defer func() {
		if logOut != nil {
			logOut.Close() // the start failed: without a writer, the drain ends
		}
	}()
	switch {
	case sockErr != nil:
		err = sockErr
	case err != nil:
		err = fmt.Errorf("agent filesystem: %w", err)
	case logErr != nil:
		err = fmt.Errorf("its log: %w", logErr)
	}
	if err != nil {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, err)
	}
	rt.ctx = cx
	run.rememberCtx(a.ID, cx)
	run.holdControl(a, cx)
	command, err := resolveCommand(spec.Command, dir)
	if err != nil {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, err)
	}
	argv, readGroups, held, sbSpec, err := run.sandboxArgv(a, cx, command, view)
	view = nil // sandboxArgv took it or discarded it
	if err != nil {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, err)
	}
	defer authority.CloseFiles(held) // the process has its own copies once started
	flat, ok := run.auth.Flat(a.ID)
	if ok && run.uids == nil && (flat.UID != nil || flat.GID != nil || flat.Groups != nil) {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, errors.New("its policy sets uid, gid or groups, which needs a daemon running as root"))
	}
	session := cx.session.ID
	var result *kin.ResultStatus
	if cx.resultChan {
		running := kin.ResultRunning
		result = &running
	}
	// The key is recorded before the process runs: an agent that asks for
	// its token at once must find it (it raced the start's record before).
	if !recorded {
		if err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error { return tx.AgentKeyInsert(ctx, keyRow) }); err != nil {
			run.removeRuntime(a.ID)
			return nil, run.failStart(ctx, a, fmt.Errorf("record its key: %w", run.storeError(err)))
		}
	}
	// Its process runs only once its record is on the disk: "when kin
	// spawn returns, the agent and its process are on record".
	if key.durable != nil {
		if err := key.durable(); err != nil {
			run.removeRuntime(a.ID)
			return nil, run.failStart(ctx, a, fmt.Errorf("its record: %w", run.storeError(err)))
		}
	}
	cred := withGroups(run.agentCredential(a.ID), readGroups)
	proc, err := run.sup.Start(ctx, supervisor.Spec{
		ID:         a.ID,
		ParentID:   a.Parent,
		Detached:   a.Life == kin.LifeDetached,
		Argv:       argv,
		Env:        append(run.agentEnv(a, sock.Path(), cursor, spec.Env), ctxEnv...),
		Dir:        dir,
		Stdout:     logOut,
		Stderr:     logOut,
		Credential: cred,
		ExtraFiles: held, // descriptors 3, ...: Spec.Held's numbers
		Limits:     run.limitsFor(flat).group,
		Direct:     run.directStart(a, sbSpec, held, cred),
	})
	logOut.Close() // the process has its own copy; without one, the drain ends
	logOut = nil
	if err != nil {
		run.removeRuntime(a.ID)
		return nil, run.failStart(ctx, a, err)
	}
	rt.proc = proc
	pid, started := proc.Pid, proc.Started.UTC()
	now := run.now()
	// Lazily durable (store.LazyUpdater): committed and visible when it
	// returns, and safe from a crash of the daemon; only a crash of the
	// machine may lose it, which also ends the process it records. The
	// registration before it is durable.
	err = store.UpdateAfterLazy(ctx, run.store, func(tx store.Tx, _ *store.AfterCommit) error {
		if placed {
			if err := checkNotWithdrawn(ctx, tx, a.ID); err != nil {
				return err
			}
		}
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, PID: &pid, StartedAt: &started, Session: &session, Result: result}); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, run.now(), kin.EventAgentStarted, a.ID, a.Parent, kin.AgentStartedData{Agent: a.ID, PID: pid, Command: spec.Command})
	})
	if err != nil {
		// The process runs but is not recorded: do not leave it unsupervised.
		if errors.Is(err, errWithdrawn) {
			run.log.Warn("placed agent withdrawn by its spawner as it started: stopped", "agent", a.ID)
		} else {
			run.log.Error("record start", "agent", a.ID, "err", err)
		}
		run.sup.Kill(context.Background(), a.ID)
		return nil, run.storeError(err)
	}
	run.ps.RememberLocal(a.ID, keyRow.Local)
	run.log.Info("agent started", "agent", a.ID, "name", a.Name, "pid", pid)
	out := *a // what was just written, without reading it back
	out.PID, out.StartedAt, out.UpdatedAt, out.Session = pid, started, now, session
	if result != nil {
		out.Result = *result
	}
	return &out, nil
}

// failStart records that an agent's process could not start and returns
// the error for the spawner.
func (run *Runner) failStart(ctx context.Context, a *kin.Agent, cause error) error {
	now := run.now()
	status, state, reason := kin.StatusTerminated, kin.StateFailed, reasonStartFail
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		if cur, err := tx.AgentGetByID(ctx, a.ID); err != nil {
			return err
		} else if !cur.EndedAt.IsZero() {
			return nil // recorded already: a placed agent its spawner withdrew
		}
		p := store.AgentUpdateParams{ID: a.ID, At: now, Status: &status, State: &state, EndedAt: &now, EndReason: &reason}
		run.ctxMu.Lock()
		c := run.ctxAgents[a.ID]
		run.ctxMu.Unlock()
		failed := kin.ResultFailed
		if c != nil && c.resultChan {
			p.Result = &failed
		}
		if err := tx.AgentUpdate(ctx, p); err != nil {
			return err
		}
		if p.Result != nil {
			if err := appendResult(ctx, tx, now, a.ID, a.Parent, failed, []string{"the process could not start: " + cause.Error()}); err != nil {
				return err
			}
		}
		return store.AppendEvent(ctx, tx, now, kin.EventAgentFailed, a.ID, a.Parent, kin.AgentFailedData{Agent: a.ID, Parent: a.Parent, Reason: reason, Detail: cause.Error()})
	})
	if err != nil {
		run.log.Error("record failed start", "agent", a.ID, "err", err)
	}
	code := kin.ECodeInvalid
	switch {
	case errors.Is(cause, supervisor.ErrStopping), errors.Is(cause, supervisor.ErrFrozen):
		code = kin.ECodeParentNotActive
	case errors.Is(cause, supervisor.ErrClosed):
		code = kin.ECodeUnavailable
	}
	return kin.Errorf(code, "agent %d (%s) was registered but its process could not start: %v", a.ID, a.Name, cause)
}

// InheritedEnv is the part of every agent's environment that comes from
// the daemon's own: HOME, LANG, LC_ALL, TZ, TMPDIR, USER and LOGNAME, as
// the daemon has them. (The benchmarks' floors start their processes with
// it too: a command's own work follows it; a sleep with LANG set maps 13
// locale files, and its exit's page-table work doubles.)
func InheritedEnv() []string { return appendInheritedEnv(nil) }

// appendInheritedEnv appends InheritedEnv to env.
func appendInheritedEnv(env []string) []string {
	for _, k := range []string{"HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// agentEnv is the environment of an agent's process: a few variables of
// the daemon's own (InheritedEnv), kin's identity variables, then the
// spawner's.
func (run *Runner) agentEnv(a *kin.Agent, sock, cursor string, extra []string) []string {
	env := appendInheritedEnv(make([]string, 0, 12+len(extra)))
	env = append(env, "PATH="+run.agentPath)
	env = append(env,
		"KIN_AGENT_ID="+a.ID.String(),
		"KIN_AGENT_NAME="+a.Name,
		"KIN_PARENT_ID="+a.Parent.String(),
		"KIN_SOCKET="+sock,
	)
	if cursor != "" {
		env = append(env, "KIN_RESUME_CURSOR="+cursor)
	}
	if run.cfg.Models != nil {
		// The spawner's model variables are replaced by kin's: the
		// gateway's URLs and this agent's own credential.
		extra = run.cfg.Models.AgentEnv(a.ID, extra)
	}
	return append(env, extra...)
}

// agentPATH is the PATH agents get: the daemon's, with the directory of
// the published kin binary (publishKin) first.
func agentPATH(kinDir string) string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	if kinDir != "" {
		path = kinDir + string(os.PathListSeparator) + path
	}
	return path
}

// onExit is the supervisor's callback for every reaped agent process.
func (run *Runner) onExit(ex supervisor.Exit) {
	if errors.Is(ex.Err, supervisor.ErrClosed) {
		return // left running on purpose (--leave-running): the next daemon re-adopts it
	}
	if run.exitOwned(ex.ID) {
		return
	}
	run.exitWG.Add(1)
	go func() {
		defer run.exitWG.Done()
		run.handleExit(ex.ID, exitOf(ex))
	}()
}

// exitOwned does, on the reaping goroutine, what handleExit does for an
// exit that a stop or cancellation records (rt.ending; its start recorded
// already) or of an agent without a runtime: nothing but mark it exited.
// A cascade's thousand exits come while its Stop reaps them: each was a
// goroutine that only did this. False: handleExit's, on a goroutine.
func (run *Runner) exitOwned(id kin.AgentID) bool {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	rt := run.runtimes[id]
	if rt == nil {
		return true
	}
	select {
	case <-rt.ready:
	default:
		return false // its start is being recorded: handleExit waits for it
	}
	if !rt.ending {
		return false
	}
	rt.exited = true
	if run.gone != nil {
		run.gone.exited(id) // a shutdown's: its end may be recorded while the grace runs
	}
	return true
}

// exitOf translates the supervisor's exit into kin's.
func exitOf(ex supervisor.Exit) kin.Exit {
	switch {
	case ex.Err != nil:
		return kin.Exit{Code: -1}
	case ex.Signal != 0:
		return kin.Exit{Code: -1, Signal: signalName(ex.Signal), Known: true}
	}
	return kin.Exit{Code: ex.Code, Known: true}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "killed"
	case syscall.SIGTERM:
		return "terminated"
	}
	return strings.ToLower(s.String())
}

// handleExit records an agent's process ending on its own, cancels its
// owned subtree (seed 001: parent death cancels children, synchronously),
// and replaces it if its restart policy says so.
func (run *Runner) handleExit(id kin.AgentID, exit kin.Exit) {
	rt := run.runtimeOf(id)
	if rt == nil {
		return
	}
	run.rtMu.Lock()
	ready := rt.ready
	run.rtMu.Unlock()
	<-ready
	run.rtMu.Lock()
	owned := rt.ending
	rt.ending, rt.exited = true, true
	run.rtMu.Unlock()
	if owned {
		return // a stop or cancellation records this end
	}
	ctx := context.Background()
	state, reason := kin.StateTerminated, reasonExited
	if !exit.Known || exit.Code != 0 || exit.Signal != "" {
		state, reason = kin.StateExited, reasonCrashed
	}
	if rt.sock != nil {
		rt.sock.Close() // step 3 of the cancellation: nobody acts as a dead agent
	}
	// What it wrote last is in its log before its end is recorded.
	run.awaitLog(id, time.Now().Add(logFlushWait))
	var res *outcome
	if rt.ctx != nil && rt.ctx.resultChan {
		if cur, err := run.store.AgentGetByID(ctx, id); err == nil {
			o := run.collectResult(cur, rt.ctx, exit)
			res = &o
		}
	}
	// Its owned descendants, and whatever its process left behind: claimed
	// now, and marked stopping in the transaction that records its end
	// (one commit before their signals, not two).
	c, err := run.planCancel(ctx, cancelParams{Root: id, Reason: reasonParentDead, Background: true})
	if err != nil {
		run.log.Error("cancel children", "agent", id, "err", err)
	}
	// Their sockets are shut (step 3) while that transaction commits
	// (steps 1-2): both come before any signal, and neither needs the
	// other (some 10 ms each for a 1,110-agent subtree). Should the
	// commit fail, the cancellation marks them itself (silence), with
	// their sockets shut already; should that fail too, they are left
	// running, claimed, with their sockets shut: the store refuses
	// writes, and their parent is dead.
	var shut sync.WaitGroup
	if c != nil {
		socks := run.socketsOf(c)
		shut.Go(func() { agentsock.ShutAll(socks) })
	}
	a, err := run.recordEnd(ctx, id, state, reason, &exit, res, c)
	shut.Wait()
	if err != nil {
		run.log.Error("record exit", "agent", id, "err", err)
	}
	run.log.Info("agent ended", "agent", id, "exit", exit.String(), "reason", reason)
	if c != nil {
		if _, err := run.finishCancel(ctx, c); err != nil {
			run.log.Error("cancel children", "agent", id, "err", err)
		}
	}
	run.removeRuntime(id)
	run.trimEndedLogs(ctx, id)
	if a != nil {
		run.maybeRestart(ctx, a, reason)
	}
}

// recordEnd writes how an agent ended and its agent.exited event.
// With res, it also records where the agent's result stands, and its
// agent.result event. With c (its owned subtree's cancellation, planned),
// the same transaction marks c's agents stopping: steps 1-2 of the
// cancellation, which finishCancel then skips.
func (run *Runner) recordEnd(ctx context.Context, id kin.AgentID, state kin.State, reason string, exit *kin.Exit, res *outcome, c *cancellation) (*kin.Agent, error) {
	now := run.now()
	var out *kin.Agent
	var marking error // markStopping's, which the end alone may not meet
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		marking = nil
		if err := run.recordEndTx(ctx, tx, now, id, state, reason, exit, res, &out); err != nil {
			return err
		}
		if c != nil {
			marking = markStopping(ctx, tx, now, c)
			return marking
		}
		return nil
	})
	switch {
	case err == nil && c != nil:
		c.marked = true
	case err != nil && marking != nil:
		// The end alone, as before the two were one transaction; the
		// cancellation marks its agents itself (silence). An error of
		// the end's own writes is not tried twice.
		run.log.Warn("record exit with its subtree stopping", "agent", id, "err", err)
		return run.recordEnd(ctx, id, state, reason, exit, res, nil)
	}
	return out, err
}

// recordEndTx is recordEnd's writes in tx; *out is the agent's row after.
func (run *Runner) recordEndTx(ctx context.Context, tx store.Tx, now time.Time, id kin.AgentID, state kin.State, reason string, exit *kin.Exit, res *outcome, out **kin.Agent) error {
	status := kin.StatusTerminated
	a, err := tx.AgentGetByID(ctx, id)
	if err != nil {
		return err
	}
	if !a.EndedAt.IsZero() {
		*out = a
		return nil // recorded already
	}
	p := store.AgentUpdateParams{ID: id, At: now, Status: &status, State: &state, EndedAt: &now, Exit: exit, EndReason: &reason}
	if res != nil {
		p.Result = &res.status
	}
	if err := tx.AgentUpdate(ctx, p); err != nil {
		return err
	}
	data := kin.AgentExitedData{Agent: id, State: state, Reason: reason}
	if exit != nil {
		data.Code, data.Signal, data.Known = exit.Code, exit.Signal, exit.Known
	}
	if err := store.AppendEvent(ctx, tx, now, kin.EventAgentExited, id, a.Parent, data); err != nil {
		return err
	}
	if err := run.ps.RevokeAgentsTx(ctx, tx, now, []kin.AgentID{id}, "agent ended: "+reason); err != nil {
		return err
	}
	if res != nil {
		if err := appendResult(ctx, tx, now, id, a.Parent, res.status, res.violations); err != nil {
			return err
		}
	}
	*out, err = tx.AgentGetByID(ctx, id)
	return err
}

// Stop stops an agent's process and cancels its owned subtree the same way
// parent death does (reason "stopped"). An agent may stop only its
// descendants.
func (run *Runner) Stop(ctx context.Context, req kin.StopRequest) ([]*kin.Agent, error) {
	if err := run.authorize(ctx, req.ID, false); err != nil {
		return nil, err
	}
	if req.Grace != nil && (*req.Grace < 0 || time.Duration(*req.Grace) > kin.MaxGrace) {
		return nil, kin.Errorf(kin.ECodeInvalid, "grace %s is outside 0..%s", time.Duration(*req.Grace), kin.MaxGrace)
	}
	if err := run.awaitReconciled(ctx, req.ID); err != nil {
		return nil, err // whether it still runs is known once it is checked
	}
	a, err := run.store.AgentGetByID(ctx, req.ID)
	if err != nil {
		return nil, run.agentError(err, req.ID)
	}
	if a.State.Terminal() {
		return nil, kin.Errorf(kin.ECodeInvalidTransition, "agent %d has already ended (%s)", a.ID, a.State)
	}
	return run.cancelTree(context.WithoutCancel(ctx), cancelParams{Root: req.ID, Reason: reasonStopped, Grace: req.Grace, IncludeRoot: true, Rows: true})
}

// cancelParams says which subtree cancelTree stops, why and how.
type cancelParams struct {
	Root        kin.AgentID
	Reason      string        // reasonStopped, authority.ReasonBudget, ...: the end reason and the events'
	Grace       *kin.Duration // nil: the longest of the agents' own graces
	IncludeRoot bool          // false: the root's owned children only
	RootState   kin.State     // the root's final state; "" is cancelled
	// ParentEnded: the root is cancelled as an owned child whose parent
	// ended (on another host of the fleet), so it gets its
	// agent.child.cancel event too.
	ParentEnded bool
	// Rows: the caller gives the agents' rows as recorded to someone (the
	// API's stop), so the record reads them whole; otherwise it reads
	// only the columns it decides on (store.Reader.AgentListLeanByIDs).
	Rows bool
	// Background: nobody waits for the cancellation's end (a parent's
	// death, which its exit's handler cancels): once its record has
	// committed, its agents' pipes are retired and its groups removed on
	// one goroutine of their own, leaving a core to the record's readers.
	// Without it, they are done before the cancellation returns (a Stop
	// answers with no pipe left at its path).
	Background bool
}

// cancelTree is seed 001's cancellation sequence for the owned subtree of
// p.Root (the root itself too when p.IncludeRoot): mark them stopping, close
// their sockets, SIGTERM (with SIGCONT) their cgroups, wait the grace,
// SIGKILL what is left (cgroup.kill), wait until the cgroups are empty,
// mark each cancelled, and append agent.child.cancel and agent.stop for
// each. Detached children and their subtrees are left alone.
func (run *Runner) cancelTree(ctx context.Context, p cancelParams) ([]*kin.Agent, error) {
	c, err := run.planCancel(ctx, p)
	if err != nil {
		return nil, err
	}
	return run.finishCancel(ctx, c)
}

// cancellation is a cancelTree whose agents are claimed (planCancel) and
// not yet stopped (finishCancel).
type cancellation struct {
	cancelParams
	began time.Time
	mine  []*kin.Agent // the agents it records, parents first
	// remote are the running agents of the subtree on other hosts of the
	// fleet, by host: silence marks them stopping in its transaction and
	// asks each host to cancel its own (EventFleetCancel).
	remote map[string][]*kin.Agent
	// marked: its agents are recorded stopping already (in the
	// transaction that recorded its root's end: recordEnd).
	marked bool
	// gone: a shutdown's, which records its agents but its root as they
	// are found gone while the grace runs (nil: its stop records them all);
	// signalled tells it once the subtree's SIGTERM went out, or its stop
	// ended without one.
	gone      *goneEnds
	signalled func()
	// unhold lets the store's warmer read again (store.WarmHolder): held
	// from the plan of a large cancellation to its record, or to its
	// SIGTERM when it has a grace.
	unhold func()
}

// largeCancel is the fewest agents a cancellation holds the store's
// warmer (store.WarmHolder) and, killing at once, the yield gate (yield.go)
// for: below it, the rows read again and the work held back are few.
const largeCancel = 64

// letWarm releases c's hold on the store's warmer, if any; more than once
// is fine.
func (c *cancellation) letWarm() {
	if c.unhold != nil {
		c.unhold()
	}
}

// planCancel is the first step of cancelTree: it finds the owned subtree
// and claims its running agents, without writing or waiting. A shutdown
// plans every independent subtree first, parents before children, then
// finishes them all at once.
func (run *Runner) planCancel(ctx context.Context, p cancelParams) (*cancellation, error) {
	root, includeRoot := p.Root, p.IncludeRoot
	began := time.Now()
	if run.reg != nil {
		// The subtree as the store has it now: a child another host
		// registered a moment ago may not be in the lineage yet.
		if err := run.reg.CatchUp(ctx); err != nil {
			run.log.Error("cancel: read the registrations the lineage had not seen yet (the plan goes on with what it has)", "root", root, "err", err)
		}
	}
	if err := run.awaitReconciled(ctx, run.lineage.Subtree(root)...); err != nil {
		return nil, err
	}
	ids := run.lineage.Subtree(root)
	if ids == nil {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", root)
	}
	// Only the columns the plan and the signals decide on (whole rows
	// read from SQLite cost 2-3.4 ms more of CPU over a 1,111-agent tree:
	// the store's BenchmarkCascadeRecord; a large read takes them from the
	// row cache where there is one, in 1-6 ms rather than 7-9).
	all, err := run.store.AgentListLeanByIDs(ctx, ids)
	if err != nil {
		return nil, run.storeError(err)
	}
	// The owned subtree, parents before children.
	in := map[kin.AgentID]bool{root: true}
	var targets []*kin.Agent
	for _, a := range all {
		if a.ID != root && (!in[a.Parent] || a.Life == kin.LifeDetached) {
			continue
		}
		in[a.ID] = true
		if (a.ID != root || includeRoot) && !a.State.Terminal() {
			targets = append(targets, a)
		}
	}
	// Claim the running ones: a concurrent cancellation that claimed an
	// agent first records it.
	var mine []*kin.Agent
	var remote map[string][]*kin.Agent
	run.rtMu.Lock()
	for _, a := range targets {
		if !run.ownsAgent(a) && a.Running() {
			if remote == nil {
				remote = map[string][]*kin.Agent{}
			}
			remote[a.Host] = append(remote[a.Host], a)
			continue
		}
		if rt := run.runtimes[a.ID]; rt != nil {
			if rt.ending && a.ID != root {
				continue
			}
			rt.ending = true
		}
		mine = append(mine, a)
	}
	run.rtMu.Unlock()
	c := &cancellation{cancelParams: p, began: began, mine: mine, remote: remote}
	if h, ok := run.store.(store.WarmHolder); ok && len(mine) >= largeCancel {
		c.unhold = h.HoldWarming() // until its record (stopAndRecord), or its failure
	}
	return c, nil
}

// ownsAgent reports whether a is this host's to run and record: recorded
// on it, or on no host (a store from before the fleet), or on any host
// when the runner has none.
func (run *Runner) ownsAgent(a *kin.Agent) bool {
	return run.cfg.Host == "" || a.Host == "" || a.Host == run.cfg.Host
}

// finishCancel is the rest of cancelTree: steps 1-8 of the sequence for
// the agents c claimed.
func (run *Runner) finishCancel(ctx context.Context, c *cancellation) ([]*kin.Agent, error) {
	defer c.letWarm()
	unyield := func() {}
	if len(c.mine) >= largeCancel && run.graceOf(c) == 0 {
		// Killed at once, its processes fill the cores until it answers
		// (yield.go); a grace leaves them idle mostly, and the writer
		// need not wait through it.
		unyield = run.yield.hold()
	}
	defer unyield()
	socks, err := run.silence(ctx, c)
	if err != nil {
		return nil, err
	}
	done, err := run.stopAndRecord(ctx, c)
	// Their sockets' files are removed once their ends are recorded: on a
	// served agent/ each removal is a write to the daemon's own FUSE
	// connection, CPU that the dying processes and the record need more
	// (FUSE writes, most likely these, were an eighth of the daemon's CPU
	// between its kill and the group's end in a 1,110-agent cascade:
	// PERFORMANCE, session 12). The record freed their names: a later agent
	// of one of them removes the old file itself before it binds the path
	// (agentsock's Listen), and this removal then does nothing.
	agentsock.UnlinkAll(socks)
	if err != nil || len(c.remote) == 0 {
		return done, err
	}
	unyield() // other hosts stop theirs: this one's cores are free again
	return append(done, run.awaitRemote(ctx, c)...), nil
}

// silence is steps 1-3 of the cancellation for the agents of cs: mark them
// stopping (one transaction, unless recordEnd marked them: c.marked) and
// close their sockets: shut (no connection accepted or served from then
// on). It returns the sockets, whose files the caller removes
// (agentsock.UnlinkAll): on a served agent/ each removal is a write to the
// daemon's own FUSE connection (removeSocket; an unlink was a request to
// its server, a tenth of a second for 1,110 agents on two cores), which
// need not delay the signals nor the record (a later agent of one of their
// names removes the old file itself before it binds the path: agentsock's
// Listen): finishCancel removes them after the record. A shutdown silences
// every subtree at once before it signals any.
func (run *Runner) silence(ctx context.Context, cs ...*cancellation) ([]*agentsock.Socket, error) {
	// 1-2: mark them stopping, unless done already.
	var unmarked []*cancellation
	for _, c := range cs {
		if !c.marked && len(c.mine)+len(c.remote) > 0 {
			unmarked = append(unmarked, c)
		}
	}
	if len(unmarked) > 0 {
		now := run.now()
		err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
			return markStopping(ctx, tx, now, unmarked...)
		})
		if err != nil {
			return nil, run.storeError(err)
		}
		for _, c := range unmarked {
			c.marked = true
		}
	}
	// 3: close their sockets (shut already by a parent's death's: handleExit).
	socks := run.socketsOf(cs...)
	agentsock.ShutAll(socks)
	return socks, nil
}

// socketsOf is the sockets of cs's agents.
func (run *Runner) socketsOf(cs ...*cancellation) []*agentsock.Socket {
	var socks []*agentsock.Socket
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	for _, c := range cs {
		for _, a := range c.mine {
			if rt := run.runtimes[a.ID]; rt != nil && rt.sock != nil {
				socks = append(socks, rt.sock)
			}
		}
	}
	return socks
}

// markStopping is steps 1-2 of the cancellation for the agents of cs, in
// tx: one decision for the whole subtree, on every host: this host's
// agents and the other hosts' are marked stopping in one transaction, with
// each other host asked to cancel its own.
func markStopping(ctx context.Context, tx store.Tx, now time.Time, cs ...*cancellation) error {
	stopping := kin.StateStopping
	var mine []kin.AgentID
	for _, c := range cs {
		for _, a := range c.mine {
			mine = append(mine, a.ID)
		}
	}
	if len(mine) > 0 {
		if err := tx.AgentUpdateMany(ctx, mine, store.AgentUpdateParams{At: now, State: &stopping}); err != nil {
			return err
		}
	}
	for _, c := range cs {
		for _, host := range slices.Sorted(maps.Keys(c.remote)) {
			// Read again under the write lock (in one read): another
			// host may have recorded its agent's end, or been asked to
			// stop it already, since planCancel read it.
			asked := idsOf(c.remote[host])
			curs, err := tx.AgentListLeanByIDs(ctx, asked)
			if err != nil {
				return err
			}
			if len(curs) != len(asked) {
				return fmt.Errorf("%w: %d of host %s's agents to stop", store.ErrNotFound, len(asked)-len(curs), host)
			}
			var ids []kin.AgentID
			for _, cur := range curs {
				if !cur.State.Terminal() && cur.State != kin.StateStopping {
					ids = append(ids, cur.ID)
				}
			}
			if len(ids) == 0 {
				continue
			}
			if err := tx.AgentUpdateMany(ctx, ids, store.AgentUpdateParams{At: now, State: &stopping}); err != nil {
				return err
			}
			if err := store.AppendEvent(ctx, tx, now, kin.EventFleetCancel, c.Root, 0, kin.FleetCancelData{
				Host: host, Root: c.Root, Agents: ids, Reason: c.Reason, Grace: c.Grace,
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// releasingGroups, when set (tests), is called as a cancellation lets
// its emptied groups be removed (stopAndRecord).
var releasingGroups func()

// graceOf is how long c's processes are given after their SIGTERM: its
// own grace, else the largest of its agents', cut to what is left of a
// shutdown's deadline.
func (run *Runner) graceOf(c *cancellation) time.Duration {
	grace := time.Duration(0)
	for _, a := range c.mine {
		grace = max(grace, time.Duration(a.Grace))
	}
	if c.Grace != nil {
		grace = time.Duration(*c.Grace)
	}
	return run.graceWithin(grace)
}

// stopAndRecord is steps 4-8 of the cancellation, once silenced: signal,
// grace, kill, wait, record.
func (run *Runner) stopAndRecord(ctx context.Context, c *cancellation) ([]*kin.Agent, error) {
	root, reason, mine, began := c.Root, c.Reason, c.mine, c.began
	defer c.letWarm() // on the ways out before the record
	maxGrace := run.graceOf(c)
	if maxGrace > 0 {
		// Signalled first: the store's warmer reads the rows the stopping
		// commit changed while the grace runs (a kill after it has nothing
		// new for it), rather than waiting for the record.
		c.letWarm()
	}
	// 4-6: SIGTERM, grace, SIGKILL, wait until empty. The root's group
	// holds every owned descendant's group, and what the root's own process
	// left behind. The emptied groups are removed once the record below
	// has committed: their rmdirs (two per agent) would compete with it.
	sctx, releaseGroups := run.sup.HoldRemovals(ctx)
	if releasingGroups != nil {
		release := releaseGroups
		releaseGroups = func() { releasingGroups(); release() }
	}
	defer func() { releaseGroups() }() // on the ways out before the record
	if c.signalled != nil {
		sctx = supervisor.OnSignalled(sctx, c.signalled)
	}
	// Their pipes stay at their paths once drained, until the record
	// below has committed: the record waits for their output to be in
	// their logs, not for the pipes' renames (retirePipes).
	pipes := run.holdPipes(mine)
	defer func() { retirePipes(pipes) }() // on the ways out before the record
	// Once the kill has emptied the root's group, its agents' ends are
	// recorded beside the reaping of the last exits (recordBeside).
	var beside *besideRecord
	rctx := sctx
	if c.gone == nil && c.signalled == nil && reason != authority.ReasonBudget && reason != authority.ReasonDeadline {
		rctx = supervisor.OnEmpty(sctx, func(covered []kin.AgentID) {
			if beside == nil {
				beside = run.recordBeside(ctx, c, covered)
			}
		})
	}
	if err := run.sup.Stop(rctx, root, maxGrace); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
		run.log.Error("stop cgroup", "agent", root, "err", err)
	}
	for _, a := range mine { // agents under a registered-only root have groups of their own
		if rt := run.runtimeOf(a.ID); rt != nil && a.ID != root {
			if err := run.sup.Stop(sctx, a.ID, maxGrace); err != nil && !errors.Is(err, supervisor.ErrUnknownAgent) {
				run.log.Error("stop cgroup", "agent", a.ID, "err", err)
			}
		}
	}
	var done, recorded []*kin.Agent
	var err error
	if beside != nil {
		<-beside.done
		recorded, err = beside.recorded, beside.err
	} else {
		// Their processes are gone: the model gateway refuses their
		// credentials from now on (Runs), not only once each exit is
		// handled on its own goroutine or the end recorded below.
		if c.signalled != nil {
			c.signalled() // (if its Stop did not, having nothing to signal)
		}
		run.markExited(mine)
		// What a shutdown recorded already while the grace ran (goneEnds)
		// is not recorded again.
		done = c.gone.take(c)
		rest := mine
		if len(done) > 0 {
			early := make(map[kin.AgentID]bool, len(done))
			for _, a := range done {
				early[a.ID] = true
			}
			rest = slices.DeleteFunc(slices.Clone(mine), func(a *kin.Agent) bool { return early[a.ID] })
		}
		// Their output is in their logs before their ends are recorded.
		flushBy := time.Now().Add(logFlushWait)
		for _, a := range rest {
			run.awaitLog(a.ID, flushBy)
		}
		// A subtree stopped for its budget or deadline hands back what it
		// had made so far: partial, marked cancelled, but kept.
		if reason == authority.ReasonBudget || reason == authority.ReasonDeadline {
			whole, err := run.store.AgentListByIDs(ctx, idsOf(mine)) // the plan's rows are lean
			if err != nil {
				run.log.Warn("keep partial results: read the agents", "root", root, "err", err)
			}
			for _, a := range whole {
				run.keepPartial(ctx, a)
			}
		}
		// 7-8: record.
		if len(rest) > 0 { // a leaf's exit has nothing to record here: no batch for it
			ends := make([]stopEnd, len(rest))
			for i, a := range rest {
				ends[i] = stopEnd{c: c, a: a}
			}
			recorded, err = run.recordStopped(ctx, c, ends)
		}
	}
	c.letWarm() // their rows, changed by the record too, are read once
	if c.Background {
		// Done one after the other on one goroutine: the record's readers
		// (a follower of the log, a client waiting for the subtree) have
		// the other core. Both at once here, the groups' rmdirs on their
		// goroutine and the pipes' renames on this one, kept both cores
		// after a 1,110-agent record, and a follower saw it 11-68 ms after
		// its commit, 7-40 ms so (PERFORMANCE, session 14).
		ps, release := pipes, releaseGroups
		releaseGroups = func() {} // the goroutine's to call now, not the defer's
		go func() {
			retirePipes(ps)
			run.yield.afterFree(release)
		}()
	} else {
		// The groups' rmdirs once no large cancellation runs: after
		// this one's answer, and after the others' that run beside it.
		run.yield.afterFree(releaseGroups)
		releaseGroups = func() {} // the gate's to call now, not the defer's
		retirePipes(pipes)
	}
	pipes = nil
	// Their sockets' files are the caller's to remove, all at once:
	// finishCancel's after this record, a shutdown's after every stop.
	for _, a := range mine {
		run.dropRuntime(a.ID, false)
	}
	if err != nil {
		return nil, run.storeError(err)
	}
	known := make(map[kin.AgentID]*kin.Agent, len(recorded))
	for _, a := range recorded {
		known[a.ID] = a
	}
	run.trimEnded(context.WithoutCancel(ctx), known, idsOf(recorded))
	done = append(done, recorded...)
	if len(done) > 0 {
		run.obs.Cascade(reason, len(done), began)
		run.log.Info("cancelled", "root", root, "agents", len(done), "reason", reason)
	}
	return nonNil(done), nil
}

// recordStopped is steps 7-8 of the cancellation c: ends recorded in one
// transaction (recordStoppedTx).
func (run *Runner) recordStopped(ctx context.Context, c *cancellation, ends []stopEnd) (recorded []*kin.Agent, err error) {
	now := run.now()
	err = run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		var err error
		recorded, err = run.recordStoppedTx(ctx, tx, now, ends, c.Rows)
		return err
	})
	return recorded, err
}

// besideRecord is a cancellation's record made beside the reaping of its
// kill's last exits (recordBeside): done is closed once it committed, or
// failed (err).
type besideRecord struct {
	done     chan struct{}
	recorded []*kin.Agent
	err      error
}

// exitWait bounds how long recordBeside waits for a process whose status
// only its reaping tells (Process.PeekExit) once its group is empty: a
// zombie's reaping is the next thing the kill's goroutine does.
const exitWait = 10 * time.Second

// recordBeside starts the record of c (steps 7-8) once the kill emptied
// its root's group, and returns it; nil when some agent of c has a process
// outside the groups that kill covered (covered: their agents), whose end
// the sequential record after every Stop then waits for. Every process in
// those groups has exited by then, and how is known before it is reaped
// (Process.PeekExit): the record, one core's work of some 70 ms for a
// 1,110-agent subtree, no longer waits for the reaping of the kill's last
// exits, the kernel's release of each task, some 10-60 ms more on the
// other core (issue 22's cascade). A reader that sees the record may still
// find a zombie of one of them for those milliseconds, never a process
// that runs.
func (run *Runner) recordBeside(ctx context.Context, c *cancellation, covered []kin.AgentID) *besideRecord {
	if len(c.mine) == 0 {
		return nil // a leaf's leftovers killed: nothing to record (stopAndRecord makes no batch for it)
	}
	in := make(map[kin.AgentID]bool, len(covered))
	for _, id := range covered {
		in[id] = true
	}
	procs := make([]*supervisor.Process, len(c.mine))
	run.rtMu.Lock()
	for i, a := range c.mine {
		rt := run.runtimes[a.ID]
		if rt == nil || rt.proc == nil || !in[a.ID] {
			// Not started (or its start in flight), or outside the kill:
			// the record waits for every Stop, as before.
			run.rtMu.Unlock()
			return nil
		}
		procs[i] = rt.proc
	}
	run.rtMu.Unlock()
	// Their processes are gone: the model gateway refuses their
	// credentials from now on (Runs).
	run.markExited(c.mine)
	r := &besideRecord{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		flushBy := time.Now().Add(logFlushWait)
		ends := make([]stopEnd, len(c.mine))
		for i, a := range c.mine {
			// Its output is in its log before its end is recorded.
			run.awaitLog(a.ID, flushBy)
			// The group reads empty a moment before its last tasks are
			// zombies (reapKilled): those are told by their reaping.
			ex, ok := procs[i].PeekExit()
			if !ok {
				t := time.NewTimer(exitWait)
				select {
				case <-procs[i].Done():
					ex, ok = procs[i].Exit()
				case <-t.C:
				}
				t.Stop()
			}
			exit := kin.Exit{Code: -1}
			if ok {
				exit = exitOf(ex)
			}
			ends[i] = stopEnd{c: c, a: a, exit: &exit}
		}
		r.recorded, r.err = run.recordStopped(ctx, c, ends)
	}()
	return r
}

// maybeRestart replaces an agent that ended by itself when its restart
// policy says so, within the profile's restart intensity (seed 002 §5.2:
// the replacement resumes from the last cursor).
func (run *Runner) maybeRestart(ctx context.Context, old *kin.Agent, reason string) {
	switch {
	case old.Restart == kin.RestartAlways && (reason == reasonExited || reason == reasonCrashed || reason == reasonOffline):
	case old.Restart == kin.RestartOnFailure && (reason == reasonCrashed || reason == reasonOffline):
	default:
		return
	}
	run.rtMu.Lock()
	down := run.shuttingDown
	run.rtMu.Unlock()
	if down {
		return
	}
	if old.Parent != 0 {
		p, err := run.store.AgentGetByID(ctx, old.Parent)
		if err != nil || p.Status != kin.StatusActive || p.State.Terminal() || p.State == kin.StateStopping {
			return // a dead or stopping parent gets no replacement children
		}
	}
	prof := run.reg.Profile()
	restarts, err := run.recentRestarts(ctx, old, run.now().Add(-time.Duration(prof.Restart.Period)))
	if err != nil {
		run.log.Error("restart intensity", "agent", old.ID, "err", err)
		return
	}
	if restarts >= prof.Restart.MaxRestarts {
		run.markFailed(ctx, old, fmt.Sprintf("restart intensity exceeded: %d restarts within %s", restarts, time.Duration(prof.Restart.Period)))
		return
	}
	spec, err := run.store.AgentProcessSpec(ctx, old.ID)
	if err != nil {
		run.log.Error("restart spec", "agent", old.ID, "err", err)
		return
	}
	req := kin.RegisterRequest{
		Name: old.Name, Role: old.Role, Parent: old.Parent, Responsible: old.Responsible,
		ConstitutionHash: old.ConstitutionHash, CapabilityHash: old.CapabilityHash,
		Scope: old.Scope, SelfModifying: old.SelfModifying, Life: old.Life,
	}
	// Its own stage and policy, as it has them now (a promotion included):
	// without them the replacement would get all its parent has, which the
	// agent itself had given up.
	req.Stage, req.Policy = run.auth.Own(old.ID)
	extra := &registry.SpawnExtra{Command: spec.Command, Env: spec.Env, Dir: spec.Dir, Restart: old.Restart, Grace: old.Grace, Replaces: old.ID, Handoff: spec.Handoff,
		Host:        run.cfg.Host,    // where the old one ran, not its parent's host
		RequestedBy: old.RequestedBy} // an escalated agent's replacement is held to the same asker
	began := run.obs.TraceBegan()
	a, err := run.reg.RegisterSpawn(ctx, req, *extra) // the operator's context: the supervisor acts
	if err != nil {
		run.obs.Traced(ctx, SpawnKindRestart, req.Parent, req.Name, nil, began, err)
		run.markFailed(ctx, old, "replacement refused: "+err.Error())
		return
	}
	err = run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		return store.AppendEvent(ctx, tx, run.now(), kin.EventAgentReplaced, old.ID, old.Parent, kin.AgentReplacedData{
			Agent: old.ID, Replacement: a.ID, Cursor: old.Cursor, Reason: reason, Restarts: restarts + 1,
		})
	})
	if err != nil {
		run.log.Error("record replacement", "agent", old.ID, "err", err)
	}
	started, err := run.start(ctx, a, spec, old.Cursor)
	if err != nil {
		run.log.Error("start replacement", "agent", a.ID, "err", err)
	} else {
		a = started
	}
	run.obs.Traced(ctx, SpawnKindRestart, req.Parent, req.Name, a, began, err)
}

// recentRestarts counts the replacements in old's chain (old, the agent it
// replaced, and so on) created since since.
func (run *Runner) recentRestarts(ctx context.Context, old *kin.Agent, since time.Time) (int, error) {
	n := 0
	for a := old; a.Replaces != 0 && !a.CreatedAt.Before(since); {
		n++
		prev, err := run.store.AgentGetByID(ctx, a.Replaces)
		if err != nil {
			return n, err
		}
		a = prev
	}
	return n, nil
}

// markFailed records that an agent will not be replaced, and alerts its parent.
func (run *Runner) markFailed(ctx context.Context, a *kin.Agent, why string) {
	now := run.now()
	state := kin.StateFailed
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, State: &state}); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, now, kin.EventAgentFailed, a.ID, a.Parent, kin.AgentFailedData{Agent: a.ID, Parent: a.Parent, Reason: "restart_intensity", Detail: why})
	})
	if err != nil {
		run.log.Error("record failure", "agent", a.ID, "err", err)
	}
	run.log.Warn("agent failed", "agent", a.ID, "why", why)
}

// logPath is where an agent's stdout and stderr go.
func (run *Runner) logPath(id kin.AgentID) string {
	return filepath.Join(run.cfg.Home, "logs", id.String()+".log")
}

// runningCount is the number of agent processes the daemon supervises.
func (run *Runner) runningCount() int {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	n := 0
	for _, rt := range run.runtimes {
		if !rt.exited { // exited: its runtime goes once its end is recorded
			n++
		}
	}
	return n
}

// freeze freezes (or thaws) an agent's own processes, or its whole subtree.
func (run *Runner) freeze(ctx context.Context, id kin.AgentID, subtree, freeze bool) error {
	if freeze {
		return run.sup.Freeze(ctx, id, subtree)
	}
	return run.sup.Thaw(ctx, id, subtree)
}

// withGroups is c with extra supplementary groups (nil c: the daemon's own
// user, which needs none).
func withGroups(c *syscall.Credential, groups []uint32) *syscall.Credential {
	if c == nil || len(groups) == 0 {
		return c
	}
	out := *c
	out.Groups = append(slices.Clone(c.Groups), groups...)
	return &out
}

// resolveCommand finds the agent's program before anything starts: every
// agent starts through the sandbox shim, so a missing program would
// otherwise be a process that exits 127 rather than a spawn that fails and
// says which path is wrong. A name without a slash is looked up in the
// daemon's PATH, as the supervisor always did; a relative path is taken
// from the agent's working directory.
func resolveCommand(argv []string, dir string) ([]string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return argv, nil // the supervisor refuses it with its own words
	}
	name := argv[0]
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("the program %q is not in kin serve's PATH (%s): give its full path", name, os.Getenv("PATH"))
		}
		return append([]string{p}, argv[1:]...), nil
	}
	path := name
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	st, err := os.Stat(path)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("the program %s does not exist (no such file or directory)", path)
	case err != nil:
		return nil, fmt.Errorf("the program %s: %v", path, err)
	case st.IsDir():
		return nil, fmt.Errorf("the program %s is a directory", path)
	case st.Mode()&0o111 == 0:
		return nil, fmt.Errorf("the program %s is not executable (chmod +x it)", path)
	}
	return argv, nil
}

// freezeChanged freezes (or thaws) the processes of the agents whose status
// was just suspended (or resumed), then records their state: suspended only
// once the kernel says frozen.
func (run *Runner) freezeChanged(ctx context.Context, req kin.StatusRequest, changed []*kin.Agent) error {
	ids := []kin.AgentID{req.ID}
	for _, a := range changed {
		ids = append(ids, a.ID)
	}
	if err := run.awaitReconciled(ctx, ids...); err != nil {
		return err
	}
	var running []*kin.Agent
	for _, a := range changed {
		if a.Running() && run.runtimeOf(a.ID) != nil {
			running = append(running, a)
		}
	}
	if len(running) == 0 {
		return nil
	}
	freeze := req.Action == kin.ActionSuspend
	done := map[kin.AgentID]bool{}
	if req.Cascade && run.runtimeOf(req.ID) != nil {
		if err := run.freeze(ctx, req.ID, true, freeze); err != nil {
			return kin.Errorf(kin.ECodeInternal, "%s agent %d's cgroup: %v", map[bool]string{true: "freeze", false: "thaw"}[freeze], req.ID, err)
		}
		for _, a := range running {
			done[a.ID] = true
		}
	}
	for _, a := range running {
		if done[a.ID] {
			continue
		}
		if err := run.freeze(ctx, a.ID, false, freeze); err != nil {
			return kin.Errorf(kin.ECodeInternal, "%s agent %d: %v", map[bool]string{true: "freeze", false: "thaw"}[freeze], a.ID, err)
		}
	}
	now := run.now()
	err := run.update(ctx, func(tx store.Tx, _ *store.AfterCommit) error {
		for _, a := range running {
			cur, err := tx.AgentGetByID(ctx, a.ID)
			if err != nil {
				return err
			}
			if cur.State.Terminal() || cur.State == kin.StateStopping {
				continue
			}
			p := store.AgentUpdateParams{ID: a.ID, At: now}
			to := kin.StateSuspended
			if !freeze {
				to = kin.StateRegistered
				if !cur.LastHeartbeat.IsZero() {
					// It could not heartbeat while frozen: a fresh window.
					to = kin.StateActive
					p.LastHeartbeat = &now
				}
			}
			if to == cur.State {
				continue
			}
			p.State = &to
			if err := tx.AgentUpdate(ctx, p); err != nil {
				return err
			}
			if err := store.AppendEvent(ctx, tx, now, kin.EventAgentState, a.ID, a.Parent, kin.AgentStateData{Agent: a.ID, From: cur.State, To: to}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return run.storeError(err)
	}
	return nil
}

func nonNil(a []*kin.Agent) []*kin.Agent {
	if a == nil {
		return []*kin.Agent{}
	}
	return a
}

// idsOf is agents' ids, in order.
func idsOf(agents []*kin.Agent) []kin.AgentID {
	ids := make([]kin.AgentID, len(agents))
	for i, a := range agents {
		ids[i] = a.ID
	}
	return ids
}
