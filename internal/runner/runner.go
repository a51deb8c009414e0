package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kin-agents/kin/internal/agentlog"
	"github.com/kin-agents/kin/internal/agentsock"
	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

// Runner runs agents: it answers kin.RunnerService (Spawn, Stop,
// Heartbeat, Logs, Whoami, Resources, Wait, Result, ContextPack), keeps
// every agent's process in the supervisor's containment with the sandbox
// its policy gives, the agent filesystem each agent sees (ctxtree.go) and
// the writer that keeps it following the event log (ctxsync.go), each
// agent's socket (agentsock.go), and ends subtrees (cancelTree), restarts
// what its policy restarts, re-adopts what an earlier daemon left running
// (reconcile.go) and marks silent agents stale and offline (liveness.go).
type Runner struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	store   store.Store
	lineage *lineage.Tree
	reg     *registry.Registry
	auth    *authority.Authority
	ps      *personserver.Server
	obs     Observer
	uids    *uidrange.Range // the home's agent uid range; nil: agents run as the daemon's user
	quota   *quota.Limiter  // agents' heartbeats (nil: no limit); logs read the profile's quotas

	sup           *supervisor.Supervisor
	ctxDir        string // the agent filesystem's root
	ctx           *ctxfs.FS
	ctxw          *ctxWriter
	yield         yieldGate      // held by large cancellations: background work waits (yield.go)
	served        *ctxfuse.Mount // the control files served (ctxserve.go); nil: written by ctxw
	ctlSrc        *ctlSource     // what served answers from
	names         *nameIndex     // the latest agent of each name (ctxserve.go)
	ctlWriteMu    sync.Mutex     // one writeControl at a time (ctxsync.go)
	remoteMu      sync.Mutex     // one remoteChild at a time (the writer's, the resume's)
	ctxMu         sync.Mutex
	ctxAgents     map[kin.AgentID]*ctxAgent
	agentPath     string   // PATH of agent processes
	agentPathList []string // the same, split: every agent's path control file (read-only)
	envKeysMu     sync.Mutex
	envKeys       [][]string // the names of agents' environments, up to maxEnvShapes lists (read-only: agents with the same names share one)
	rtMu          sync.Mutex
	runtimes      map[kin.AgentID]*runtime
	adopted       map[kin.AgentID]*os.File // pidfds of re-adopted processes
	logMu         sync.Mutex
	drains        map[kin.AgentID]*agentlog.Drain // agents' output being copied into their logs (logs.go)
	logs          *agentlog.Poller                // waits for output on every agent's pipe
	trimMu        sync.Mutex                      // one trim of ended agents' logs at a time (trimEndedLogs)
	endedLogs     map[kin.AgentID]*agentlog.Ended // by tree root: its ended agents' logs (trimEndedLogs), under trimMu
	shuttingDown  bool
	// pending holds, while a restarted daemon reconciles (reconcile.go),
	// the agents the store says run whose processes it has not yet
	// checked; each channel is closed once its agent is re-adopted or
	// recorded lost.
	pending map[kin.AgentID]chan struct{}
	// placing holds the agents placed on this host whose start is under
	// way (followPlaced): the follower and resumePlaced may both hand one.
	placing map[kin.AgentID]bool
	// deadline is when a shutdown kills whatever is left (Shutdown sets
	// it: Config.ShutdownTimeout from then); killTimer does it.
	deadline  time.Time
	killTimer *time.Timer
	// gone records the ends of a shutdown's agents found gone while the
	// graces run (stopAgents); exitOwned tells it of their exits.
	gone   *goneEnds
	exitWG sync.WaitGroup     // exit handlers and restarts
	socks  *agentsock.Sockets // every agent's own socket
	agents http.Handler       // what the sockets serve: the API as agents reach it (Start)

	// The sandbox's default view's exceptions (agentView), and the shim
	// published for agents when the daemon is not a binary named kin.
	hiddenFromAgents, readOnlyForAgents []string
	agentDir                            string        // <ctx>/agent, canonical (agentView)
	view                                *sandbox.View // the default view, kept open (root daemons); nil: each shim walks it
	shimCopy                            string
	leanShim                            string // leanshim.Install's path, "" without one

	// fence is what fencing did (hostfail.go), under fenceMu.
	fenceMu sync.Mutex
	fence   fenceState

	// sockMount is served again, for the removal of agents' sockets
	// (removeSocket), which may run while a Close clears served: set once,
	// never cleared.
	sockMount atomic.Pointer[ctxfuse.Mount]

	wg          sync.WaitGroup // the liveness watcher, agent socket servers
	reconcileWG sync.WaitGroup // the background reconciliation's checks (not its cancellations: exitWG)
	closing     chan struct{}
	once        sync.Once
}

// Config is what a Runner is built from: the daemon's settings it reads.
type Config struct {
	Home   string // the daemon's home: kin's own files, hidden from agents
	CtxDir string // the agent filesystem's root
	// HTTPAddr is the HTTP API's address as configured ("" or "off":
	// none); ListenAddr the address it listens on, once it does.
	HTTPAddr   string
	ListenAddr func() string
	// SocketPath is the operator socket: hidden from agents.
	SocketPath string
	// AgentUIDs, UIDRange and UIDRangeDir: each agent as its own uid, from
	// the home's range (package uidrange).
	AgentUIDs   bool
	UIDRange    string
	UIDRangeDir string
	// SandboxRO, SandboxBestEffort and ShimPath: the sandbox's read-only
	// system paths, whether to run agents unrestricted without Landlock,
	// and the kin binary that applies it when the daemon is not one.
	SandboxRO         []string
	SandboxBestEffort bool
	ShimPath          string
	// Containment, CgroupName and LeaveRunning: the supervisor's.
	Containment  string
	CgroupName   string
	LeaveRunning bool
	// ShutdownTimeout bounds a shutdown: from Shutdown on, every grace
	// ends by then, and at that moment whatever still runs is killed at
	// once and recorded. 0 is DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Host is this daemon's host in the fleet (package hosts): the runner
	// runs, re-adopts, watches and stops only the agents recorded on it;
	// an owned subtree that reaches other hosts is cancelled there by
	// their daemons (EventFleetCancel). "" takes every agent as its own.
	Host string
	// AgentOpenFiles is the RLIMIT_NOFILE every agent gets where its
	// budget sets none: the one the daemon started with, which it raised
	// for itself (nil: agents inherit the daemon's, already that).
	AgentOpenFiles *sandbox.OpenFilesLimit

	Store     store.Store
	Lineage   *lineage.Tree
	Authority *authority.Authority
	Identity  *personserver.Server
	Observer  Observer
	Clock     func() time.Time
	Log       *slog.Logger
	// Quota limits agents' heartbeats (nil: no limit). Their logs are
	// bounded by the registry's profile (quotas.log_bytes, log_keep).
	Quota *quota.Limiter
	// Remote asks the other hosts of the fleet for what only the host
	// running an agent holds (package peer); nil: such requests are
	// refused, naming the host.
	Remote Remote
	// Models is the model gateway (package gateway), nil when kin serve
	// has no --model-upstream: it rewrites each agent's environment
	// (AgentEnv) and refuses a spawn whose environment holds an
	// upstream's key (CheckEnv).
	Models ModelGateway
}

// ModelGateway is what the runner asks of the model gateway.
type ModelGateway interface {
	// CheckEnv refuses a requested environment that holds a provider key.
	CheckEnv(env []string) error
	// AgentEnv is env without the variables the gateway owns, then those
	// (base URLs and agent id's own credential).
	AgentEnv(id kin.AgentID, env []string) []string
}

// Remote reaches the hosts of the fleet that run other agents than this
// host's.
type Remote interface {
	// Logs streams agent req.ID's log from host, which runs it.
	Logs(ctx context.Context, host string, req kin.LogsRequest, fn func([]byte) error) error
	// Handoff reads the checked result of agent id from host, which runs
	// it (a tar: Runner.WriteHandoff's).
	Handoff(ctx context.Context, host string, id kin.AgentID) (io.ReadCloser, error)
}

// DefaultShutdownTimeout is Config.ShutdownTimeout's default: below the 90 s
// systemd gives a service to stop before it kills it.
const DefaultShutdownTimeout = 60 * time.Second

// What a spawn span is of (Observer.Traced's kind).
const (
	SpawnKindSpawn   = "spawn"   // kin spawn: registered with a process
	SpawnKindRestart = "restart" // a replacement started by a restart policy
)

// Observer is told what the runner does: metrics and traces.
type Observer interface {
	// Cascade records one stop or cascade: how many agents it ended and
	// since when.
	Cascade(reason string, agents int, began time.Time)
	// Heartbeat records the time since an agent's previous heartbeat.
	Heartbeat(prev, now time.Time)
	// TraceBegan is when a spawn began; Traced records its span (kind:
	// "spawn" or "restart"; a is nil when nothing was recorded).
	TraceBegan() time.Time
	Traced(ctx context.Context, kind string, parent kin.AgentID, name string, a *kin.Agent, began time.Time, err error)
}

// New makes a Runner: the home's uid range allocated, nothing started.
// SetRegistry must follow before Open: the registry needs the runner's
// hooks (RegistryHooks) and the runner the registry.
func New(c Config) (*Runner, error) {
	run := &Runner{
		cfg: c, log: c.Log, now: c.Clock, store: c.Store, lineage: c.Lineage, auth: c.Authority, ps: c.Identity, obs: c.Observer, quota: c.Quota,
		ctxDir:    c.CtxDir,
		ctxAgents: map[kin.AgentID]*ctxAgent{},
		names:     newNameIndex(),
		runtimes:  map[kin.AgentID]*runtime{},
		adopted:   map[kin.AgentID]*os.File{},
		drains:    map[kin.AgentID]*agentlog.Drain{},
		pending:   map[kin.AgentID]chan struct{}{},
		placing:   map[kin.AgentID]bool{},
		endedLogs: map[kin.AgentID]*agentlog.Ended{},
		closing:   make(chan struct{}),
	}
	if run.cfg.ShutdownTimeout <= 0 {
		run.cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if run.log == nil {
		run.log = slog.New(slog.DiscardHandler)
	}
	if err := run.allocateUIDs(); err != nil {
		return nil, err
	}
	var err error
	if run.logs, err = agentlog.NewPoller(); err != nil {
		return nil, err
	}
	return run, nil
}

// SetRegistry gives the runner the registry it registers spawns with.
func (run *Runner) SetRegistry(reg *registry.Registry) { run.reg = reg }

// HTTPAddr is the address the HTTP API listens on, "" when none.
func (run *Runner) HTTPAddr() string {
	if run.cfg.ListenAddr == nil {
		return ""
	}
	return run.cfg.ListenAddr()
}

// authorize checks that the caller may act on target.
func (run *Runner) authorize(ctx context.Context, target kin.AgentID, self bool) error {
	return caller.MayActOn(ctx, target, self, run.lineage.IsDescendant)
}

// update runs fn in a store transaction (store.UpdateAfter).
func (run *Runner) update(ctx context.Context, fn func(tx store.Tx, after *store.AfterCommit) error) error {
	return store.UpdateAfter(ctx, run.store, fn)
}

func (run *Runner) agentError(err error, id kin.AgentID) error {
	return run.storeError(store.AgentError(err, id))
}

// storeError translates store failures into kin errors (store.KinError),
// logging the ones that are the store's own.
func (run *Runner) storeError(err error) error {
	err = store.KinError(err)
	if kin.ErrorCodeOf(err) == kin.ECodeInternal && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		run.log.Error("store", "err", err)
	}
	return err
}

// Open makes the agent filesystem and starts the supervisor: what must be
// there before any agent runs or an earlier daemon's is re-adopted.
func (run *Runner) Open() error {
	name := run.cfg.CgroupName
	if name == "" {
		name = defaultCgroupName(run.cfg.Home)
	}
	owner, err := filepath.Abs(run.cfg.Home)
	if err != nil {
		return err
	}
	// A root daemon killed with -9 leaves its served agent/ mounted and
	// dead (ENOTCONN): detached before anything touches it.
	if n, err := ctxfuse.DetachStale(filepath.Join(run.ctxDir, "agent"), run.log); err != nil {
		return err
	} else if n > 0 {
		run.log.Info("agent filesystem: detached the served agent/ an earlier daemon left", "dir", filepath.Join(run.ctxDir, "agent"))
	}
	if err := run.prepareDirs(); err != nil {
		return err
	}
	if err := run.checkAgentsReachCtx(); err != nil {
		return err
	}
	// Everything kin writes in the agent filesystem follows the store,
	// which is the record: it is not synced file by file (a spawn's session
	// took some fifteen fsyncs). A crash of the daemon loses none of it
	// (the page cache outlives it); after a crash of the machine, which no
	// agent outlives, the writer rebuilds the tree from the store
	// (ctxWriter's boot check).
	// Rewrites of existing files (a session's state, a child's status)
	// keep their spares in the home, beside the tree: no inode allocated
	// or freed a rewrite (ctxfs spare.go).
	spares := filepath.Join(run.cfg.Home, "ctx-spare")
	if run.ctx, err = ctxfs.Open(run.ctxDir, ctxfs.Options{NoSync: true, SpareDir: spares}); err != nil {
		return err
	}
	// What interrupted writes of an earlier run left is removed in the
	// background: walking a large tree takes a while (0.5 s for 2,000
	// agents), and the daemon's own writes are spared.
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		if n, err := run.ctx.RemoveTemps(); err != nil {
			run.log.Error("agent filesystem: remove what interrupted writes left", "err", err)
		} else if n > 0 {
			run.log.Info("agent filesystem: removed what interrupted writes left", "entries", n)
		}
	}()
	run.sup, err = supervisor.New(supervisor.Config{
		Name:        name,
		Owner:       owner,
		Containment: run.cfg.Containment,
		KeepOnClose: run.cfg.LeaveRunning,
		DeferRemove: true, // a cascade is done once its processes are reaped and recorded
		// Agents sharing the daemon's uid get a user namespace each, in
		// which the kernel counts their tasks apart (the pids limit).
		UserNamespaces: run.uids == nil,
		OnExit:         run.onExit,
		Logger:         run.log,
	})
	if err != nil {
		return err
	}
	run.agentView()
	run.socks = agentsock.New(agentsock.Config{
		Dir:     filepath.Join(run.ctxDir, "agent"),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { run.agents.ServeHTTP(w, r) }),
		Peers:   run.sup,
		Log:     run.log,
		Remove:  run.removeSocket,
	})
	run.serveControl()
	return nil
}

// WorkspaceOf is the workspace directory of a in the agent filesystem.
func (run *Runner) WorkspaceOf(a *kin.Agent) string { return run.workspaceOf(a) }

// FS is the agent filesystem (after Open).
func (run *Runner) FS() *ctxfs.FS { return run.ctx }

// Start serves every agent's socket with agents (the API as agents reach
// it), starts the agent filesystem's writer, and starts re-adopting what
// an earlier daemon left running: Start reads which agents the store says
// run and marks them not yet checked (Reconciling), and checks them in the
// background, so the daemon answers at once (reconcile.go). Liveness is
// watched once they are checked.
func (run *Runner) Start(ctx context.Context, agents http.Handler) error {
	run.agents = agents
	run.ctxw = newCtxWriter(run)
	go run.ctxw.run()
	plan, err := run.planReconcile(ctx)
	if err != nil {
		return fmt.Errorf("reconcile running agents: %w", err)
	}
	reconciled := make(chan struct{})
	run.reconcileWG.Add(1)
	go func() {
		defer run.reconcileWG.Done()
		defer close(reconciled)
		run.reconcile(plan)
		// Every agent of the plan is re-adopted (its pipe reattached) or
		// recorded lost: the pipes of the lost and of earlier runs' ended
		// agents go. Later agents are this daemon's own: never touched.
		run.removeStalePipes(plan.last)
	}()
	run.wg.Add(1)
	go run.watchLiveness(reconciled)
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		run.resumeFetches(ctx)
	}()
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		run.resumePlaced(ctx)
	}()
	return nil
}

// Shutdown starts the end: no agent is restarted or started any more,
// waiters (Wait, Logs, liveness) stop, and the shutdown's deadline
// (Config.ShutdownTimeout) starts: every grace ends by then, and then
// whatever still runs is killed at once. Close does the rest.
func (run *Runner) Shutdown() {
	run.once.Do(func() {
		close(run.closing)
		timeout := run.cfg.ShutdownTimeout
		run.rtMu.Lock()
		run.shuttingDown = true
		run.deadline = time.Now().Add(timeout)
		if run.sup != nil && !run.cfg.LeaveRunning {
			run.killTimer = time.AfterFunc(timeout, run.killAtDeadline)
		}
		run.rtMu.Unlock()
		if run.ctxw != nil {
			run.ctxw.pause() // until Close has stopped the agents
		}
	})
}

// killAtDeadline kills every agent process left when the shutdown's
// deadline passes; the cancellations waiting in their grace then record
// them (SIGKILL, reason shutdown).
func (run *Runner) killAtDeadline() {
	run.log.Warn("shutdown timeout reached: killing every agent process left at once",
		"timeout", run.cfg.ShutdownTimeout.String(), "running", run.runningCount())
	if err := run.sup.KillAll(); err != nil && !errors.Is(err, supervisor.ErrClosed) {
		run.log.Error("kill at the shutdown timeout", "err", err)
	}
}

// Close stops every agent (unless Config.LeaveRunning), the supervisor and
// the agent sockets, and brings the agent filesystem up to date with the
// store before closing it. Shutdown is called first if it was not.
// Stopping the agents is bounded by Config.ShutdownTimeout.
func (run *Runner) Close() error {
	run.Shutdown()
	var errs []error
	// What a restart's reconciliation checks is re-adopted or recorded
	// lost before anything is stopped (its cancellations are exitWG's).
	run.reconcileWG.Wait()
	if run.sup != nil {
		if !run.cfg.LeaveRunning {
			run.stopAgents(context.Background())
		}
		run.rtMu.Lock()
		for id, f := range run.adopted {
			f.Close() // ends the pidfd watchers
			delete(run.adopted, id)
		}
		run.rtMu.Unlock()
		run.exitWG.Wait()
		run.rtMu.Lock()
		if run.killTimer != nil {
			run.killTimer.Stop() // every agent is stopped and recorded
		}
		run.rtMu.Unlock()
		errs = append(errs, run.sup.Close())
		run.exitWG.Wait() // exits the supervisor reported while closing
	}
	run.closeLogs(!run.cfg.LeaveRunning)
	if run.logs != nil {
		run.logs.Close()
	}
	if run.socks != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		run.socks.Close(ctx)
	}
	run.wg.Wait()
	if run.ctxw != nil {
		run.ctxw.stop() // the tree reflects the store, shutdown included
	}
	if err := run.unserveControl(); err != nil {
		errs = append(errs, err)
	}
	if run.ctx != nil {
		run.ctx.Close()
	}
	if run.view != nil {
		run.view.Close()
	}
	return errors.Join(errs...)
}

// StopSubtree claims id's owned subtree, id included, for reason: from
// its return on, an agent of it that ends is recorded by the stop (and for
// reason), which finish makes: grace, then kill, partial results kept
// (authority.Config.Stop).
func (run *Runner) StopSubtree(ctx context.Context, id kin.AgentID, reason string) (finish func() error, err error) {
	c, err := run.planCancel(ctx, cancelParams{Root: id, Reason: reason, IncludeRoot: true})
	if err != nil {
		return nil, err
	}
	return func() error {
		_, err := run.finishCancel(ctx, c)
		return err
	}, nil
}

// graceWithin is grace, cut to what is left until the shutdown's deadline
// once the daemon shuts down.
func (run *Runner) graceWithin(grace time.Duration) time.Duration {
	run.rtMu.Lock()
	deadline := run.deadline
	run.rtMu.Unlock()
	if deadline.IsZero() {
		return grace
	}
	return max(0, min(grace, time.Until(deadline)))
}

// Supervisor is the supervisor agents run under (after Open).
func (run *Runner) Supervisor() *supervisor.Supervisor { return run.sup }

// AgentUID is the uid agent id's processes run as, when agents run as
// uids of their own (a root daemon); false when they run as the daemon's.
func (run *Runner) AgentUID(id kin.AgentID) (uint32, bool) {
	if run.uids == nil {
		return 0, false
	}
	return run.agentCredential(id).Uid, true
}

// Runs reports whether agent id runs on this host now (its process
// started or starting, not yet ended): the model gateway honours an
// agent's credential only then.
func (run *Runner) Runs(id kin.AgentID) bool {
	run.rtMu.Lock()
	defer run.rtMu.Unlock()
	rt := run.runtimes[id]
	return rt != nil && !rt.exited // an exited process's credential is revoked before its end is recorded
}

// RunningCount is how many agent processes the runner supervises now.
func (run *Runner) RunningCount() int { return run.runningCount() }

// MissingGuarantees lists, in words, what this kernel and containment
// cannot give agents.
func (run *Runner) MissingGuarantees() []string { return run.missingGuarantees() }

// DescribeContainment says what confines every agent besides its
// containment, e.g. "Landlock ABI 7".
func (run *Runner) DescribeContainment() string { return run.describeContainment() }

// UIDRangeString is the home's agent uid range as START:COUNT, "" when
// agents run as the daemon's user.
func (run *Runner) UIDRangeString() string { return run.uidRangeString() }

// OperatorConnContext marks a connection on the operator socket: a peer
// inside kin's containment is refused (it is an agent).
func (run *Runner) OperatorConnContext(ctx context.Context, c net.Conn) context.Context {
	return run.socks.OperatorConnContext(ctx, c)
}

// AgentKeyPath is where agent id finds its private key: its ctx session's
// agent.key, "" when it has none here.
func (run *Runner) AgentKeyPath(id kin.AgentID) string { return run.agentKeyPath(id) }

// Whoami returns the calling agent, nil for the operator.
func (run *Runner) Whoami(ctx context.Context) (*kin.Agent, error) {
	c := caller.Of(ctx)
	if c.Refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	if c.Agent == 0 {
		return nil, nil
	}
	return run.reg.Agent(ctx, c.Agent)
}
