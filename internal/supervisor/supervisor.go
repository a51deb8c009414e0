package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// Containment values.
const (
	ContainmentCgroup2       = "cgroup2"
	ContainmentProcessGroups = "process-groups"
)

// Errors. The daemon translates them to kin errors at its boundary.
var (
	ErrClosed       = errors.New("supervisor: closed")
	ErrUnknownAgent = errors.New("supervisor: unknown agent")
	ErrRunning      = errors.New("supervisor: agent already running")
	ErrStopping     = errors.New("supervisor: agent is stopping")
	ErrUnsupported  = errors.New("supervisor: not supported with process-groups containment")
	// ErrInFrozenSubtree: a Thaw cannot take effect because the agent lies
	// in a subtree frozen as a whole (Freeze with subtree) by itself or an
	// enclosing agent; thaw that one with subtree instead.
	ErrInFrozenSubtree = errors.New("supervisor: agent is inside a frozen subtree")
	// ErrFrozen: Start refuses to run a process for a frozen agent (its own
	// Freeze, or a subtree Freeze of it or of an enclosing agent): the
	// process would freeze between fork and exec, and Start with it.
	ErrFrozen = errors.New("supervisor: agent is frozen")
)

// SelfLeaf is the name of the leaf group, inside each agent's group, that
// holds the agent's own processes: <root>/a7/self, while child agents' groups
// nest beside it (<root>/a7/a12, their processes in <root>/a7/a12/self).
const SelfLeaf = "self"

// selfDir is the leaf holding the processes of the agent whose group is dir.
func selfDir(dir string) string { return filepath.Join(dir, SelfLeaf) }

// Log attribute keys.
const (
	keyAgent       = "agent"
	keyPid         = "pid"
	keyCgroup      = "cgroup"
	keyExit        = "exit"
	keyErr         = "err"
	keyContainment = "containment"
	keyReason      = "reason"
)

// Config configures a Supervisor. The zero value works.
type Config struct {
	// Name is the kin root cgroup's directory name, one path element;
	// default "kin-<daemon pid>". A stable name lets a restarted daemon find
	// its previous agents' groups under its own root (Discover, Adopt).
	Name string
	// Owner names the daemon (its home) on the kin root cgroup, as the
	// extended attribute RootXattr, so that another daemon started inside
	// this one's tree knows not to nest its root there.
	Owner string
	// Containment "" picks cgroup2 when a writable cgroup v2 exists, else
	// PID namespaces when this process may make user and PID namespaces,
	// else process groups; "cgroup2" and "pid-namespaces" make New fail
	// without them; "process-groups" forces the last fallback.
	Containment string
	// CloseGrace is the grace Close gives processes between SIGTERM and
	// cgroup.kill.
	CloseGrace time.Duration
	// KeepOnClose makes Close leave the processes and their groups alone
	// (for a daemon restart); it still stops the supervisor's goroutines,
	// and removes the root when no process runs under it.
	KeepOnClose bool
	// DeferRemove makes Stop return once every process is dead and reaped,
	// and remove the emptied groups in the background (Close waits for
	// that). Removing a cgroup directory costs tens of microseconds, two
	// per agent, which doubles the time of a large cascade.
	DeferRemove bool
	// UserNamespaces puts each agent of cgroup containment in a user
	// namespace of its own, mapping its uid and gid to themselves: the
	// kernel then counts its tasks (RLIMIT_NPROC) apart from the daemon's
	// user's and other agents' where they share a uid. Ignored where
	// unprivileged user namespaces are refused (UserNamespaces says).
	// PID namespaces containment always has them.
	UserNamespaces bool
	// KillTimeout bounds how long Stop waits for killed processes to be
	// gone when its ctx has no deadline; default 10s.
	KillTimeout time.Duration
	// OnExit, if set, is called once per reaped process from the
	// supervisor's one reaping goroutine, which reaps no other process
	// meanwhile: it must not block.
	OnExit func(Exit)
	Logger *slog.Logger
}

// Supervisor starts, waits for, freezes and kills agent processes, each in
// its own cgroup nested under its parent's.
type Supervisor struct {
	cfg         Config
	log         *slog.Logger
	cg          bool // cgroup2 containment
	pidns       bool // PID namespaces containment (pidns.go)
	userns      bool // each agent in a user namespace of its own (Config.UserNamespaces)
	ownNS       uint64
	reason      string
	mount       cgroup.Mount
	root        string // kin root cgroup dir; "/<name>", a virtual path, with process groups
	createdRoot bool
	// controllers are the ones enabled down kin's tree (EnableControllers):
	// each agent group limits its subtree with them.
	controllers []string
	killTimeout time.Duration
	devnull     *os.File

	cancel   context.CancelFunc
	reaping  sync.WaitGroup // reaps of this supervisor's processes in progress (reap.go)
	wg       sync.WaitGroup
	removing sync.WaitGroup            // deferred group removals (Config.DeferRemove)
	holds    map[*removalHold]struct{} // guarded by mu: HoldRemovals not released yet
	sigch    chan os.Signal
	// sweepLater: a sweep is due sweepAgain from now (reap.go).
	sweepLater atomic.Bool
	// mayBeFrozen: some group of the tree may have its cgroup.freeze set,
	// so a stop thaws as it signals (signalTree), reading each group's:
	// kin froze one (Freeze), took one over from an earlier run (Adopt),
	// or started a process that runs as the daemon's own uid, which may
	// write the groups' files. Until then none can be: the groups are the
	// daemon's, mode 0755, and its agents other uids. Never cleared.
	mayBeFrozen atomic.Bool
	// directStarts counts the processes started without the shim
	// (Spec.Direct); DirectStarted reports it.
	directStarts atomic.Int64

	// unwatched: Close took the processes out of the reaping loop
	// (guarded by children.mu, reap.go).
	unwatched bool

	mu     sync.Mutex
	closed bool
	agents map[kin.AgentID]*agent
	paths  map[string]*agent
	byNS   map[uint64]*agent     // with PID namespaces: agents by their namespace's inode
	procs  map[int]*Process      // live supervised processes by pid
	outs   map[*os.File]struct{} // output pipes being drained

	closeOnce sync.Once
	closeErr  error
}

// agent is the supervisor's record of one agent group. path is the cgroup
// directory (virtual with process groups), whose SelfLeaf holds the agent's
// own processes; a subtree is every record whose path is at or below it.
type agent struct {
	id       kin.AgentID
	path     string
	proc     *Process      // latest process, nil for groups without one
	starting chan struct{} // non-nil while Start forks into the group
	stopping chan struct{} // non-nil once a Stop covers the group; closed when done
	stopErr  error
	adopted  bool
	ns       uint64 // with PID namespaces: the inode of the agent's namespace
	nsInit   int    // and the pid of its init
	// With process groups only (cgroup2 keeps this in cgroup.freeze): a
	// Freeze of this agent alone, or of its subtree, is in force.
	freezeSelf, freezeSubtree bool
	// Freezes of this agent alone, or of its subtree, in progress: Start
	// refuses processes they cover, and they wait for Starts in flight.
	freezingSelf, freezingTree int
}

func groupName(id kin.AgentID) string { return "a" + id.String() }

// parseGroupName is groupName's inverse.
func parseGroupName(name string) (kin.AgentID, bool) {
	digits, ok := strings.CutPrefix(name, "a")
	if !ok || digits == "" || digits[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return kin.AgentID(n), true
}

func within(path, dir string) bool { return cgroup.Within(path, dir) }

func (s *Supervisor) marker(id kin.AgentID) string { return s.cfg.Name + "/" + id.String() }

// New makes the daemon a child subreaper (orphans of agents re-parent to
// it), finds its containment and creates the kin root cgroup.
//
// The root goes under the daemon's own cgroup when that is writable (the
// delegated subtree under systemd's Delegate=yes), else at the top of the
// cgroup2 mount. Processes live only in leaf groups (<group>/self), so the
// layout would stay valid with controllers enabled. Without a writable cgroup2
// (or cgroup.kill, Linux 5.14), agents get process groups instead.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Name == "" {
		cfg.Name = "kin-" + strconv.Itoa(selfPid)
	}
	if cfg.Name == "." || cfg.Name == ".." || strings.ContainsAny(cfg.Name, "/\x00\n") {
		return nil, fmt.Errorf("supervisor: name %q is not a single path element", cfg.Name)
	}
	switch cfg.Containment {
	case "", ContainmentCgroup2, ContainmentPIDNamespaces, ContainmentProcessGroups:
	default:
		return nil, fmt.Errorf("supervisor: containment %q is not %q, %q or %q", cfg.Containment, ContainmentCgroup2, ContainmentPIDNamespaces, ContainmentProcessGroups)
	}
	if cfg.KillTimeout <= 0 {
		cfg.KillTimeout = 10 * time.Second
	}
	s := &Supervisor{
		cfg:         cfg,
		log:         cfg.Logger,
		killTimeout: cfg.KillTimeout,
		agents:      map[kin.AgentID]*agent{},
		paths:       map[string]*agent{},
		byNS:        map[uint64]*agent{},
		procs:       map[int]*Process{},
		outs:        map[*os.File]struct{}{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("supervisor: PR_SET_CHILD_SUBREAPER: %w", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	s.devnull = devnull

	switch cfg.Containment {
	case ContainmentProcessGroups:
		s.reason = "requested by config"
	case ContainmentPIDNamespaces:
		if err := probePIDNamespaces(); err != nil {
			devnull.Close()
			return nil, fmt.Errorf("supervisor: pid-namespaces containment: %w", err)
		}
		s.pidns, s.reason = true, "requested by config"
	default:
		if err := s.setupCgroup(); err != nil {
			if cfg.Containment == ContainmentCgroup2 {
				devnull.Close()
				return nil, fmt.Errorf("supervisor: cgroup2 containment: %w", err)
			}
			s.reason = "no writable cgroup v2: " + err.Error()
			if nerr := probePIDNamespaces(); nerr == nil {
				s.pidns = true
			} else {
				s.reason += "; " + nerr.Error()
			}
		}
	}
	if s.cg && cfg.UserNamespaces {
		if err := probeUserNamespaces(); err != nil {
			s.log.Warn("agents share the daemon's user namespace", keyReason, err.Error())
		} else {
			s.userns = true
		}
	}
	if s.pidns {
		if s.ownNS = pidNS(selfPid); s.ownNS == 0 {
			devnull.Close()
			return nil, errors.New("supervisor: pid-namespaces containment: cannot read /proc/self/ns/pid")
		}
	}
	if !s.cg {
		s.root = "/" + cfg.Name
	}
	s.log.Info("supervisor containment", keyContainment, s.Containment(), keyCgroup, s.Root(), keyReason, s.reason)

	watchChildren()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.sigch = make(chan os.Signal, 1)
	signal.Notify(s.sigch, syscall.SIGCHLD)
	noChildStopSignals()
	s.wg.Add(1)
	go s.sweeper(ctx)
	return s, nil
}

// RootXattr is the extended attribute that marks a kin root cgroup; its
// value is the owning daemon's home.
const RootXattr = "user.kin.root"

func (s *Supervisor) setupCgroup() error {
	m, err := cgroup.FindMount()
	if err != nil {
		return err
	}
	if !m.Writable {
		return fmt.Errorf("cgroup2 at %s is mounted read-only", m.Dir)
	}
	var parents []string
	var nested error
	if own, err := m.DirOfPID(0); err == nil {
		// A daemon started inside another daemon's tree (as an agent of
		// it) must not nest its root there: the other's cascades would
		// kill its agents, and its own would stop at the other's limits.
		if root, owner := kinRootAbove(own, m.Dir); root != "" {
			nested = fmt.Errorf("this daemon's cgroup %s lies inside the kin root cgroup %s of the daemon with home %s", own, root, owner)
			s.log.Info("kin root cgroup: not nested in another daemon's tree; trying the top of the cgroup2 mount", keyReason, nested.Error())
		} else {
			parents = append(parents, own)
		}
	}
	if len(parents) == 0 || parents[0] != m.Dir {
		parents = append(parents, m.Dir)
	}
	var errs []error
	if nested != nil {
		errs = append(errs, nested)
	}
	for _, parent := range parents {
		dir := filepath.Join(parent, s.cfg.Name)
		created := true
		if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
			created = false
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		if miss := cgroup.Missing(dir); len(miss) > 0 {
			if created {
				unix.Rmdir(dir)
			}
			return fmt.Errorf("cgroup %s lacks %s (Linux 5.14 or later needed)", dir, strings.Join(miss, ", "))
		}
		if s.cfg.Owner != "" {
			// Best effort: without it a nested daemon would nest, as before.
			if err := unix.Setxattr(dir, RootXattr, []byte(s.cfg.Owner), 0); err != nil {
				s.log.Warn("mark the kin root cgroup", keyCgroup, dir, keyErr, err)
			}
		}
		s.mount, s.root, s.createdRoot, s.cg = m, dir, created, true
		s.enableControllers()
		return nil
	}
	return errors.Join(errs...)
}

// SubtreeControllers are the controllers kin enables down its tree where
// the hierarchy grants them: each agent group then limits its subtree.
var SubtreeControllers = []string{"cpu", "memory", "pids"}

// enableControllers enables, below kin's root, the SubtreeControllers its
// parent grants it (cgroup.controllers). It never changes the parent: a
// controller the parent does not grant is missing, and Controllers and
// MissingControllers say so.
func (s *Supervisor) enableControllers() {
	granted, err := cgroup.Controllers(s.root)
	if err != nil {
		s.log.Warn("cgroup controllers", keyCgroup, s.root, keyErr, err)
		return
	}
	var want []string
	for _, c := range SubtreeControllers {
		if slices.Contains(granted, c) {
			want = append(want, c)
		}
	}
	if err := cgroup.EnableControllers(s.root, want); err != nil {
		// One at a time: one the kernel refuses must not cost the others.
		s.log.Warn("cgroup controllers", keyCgroup, s.root, keyErr, err)
		var ok []string
		for _, c := range want {
			if cgroup.EnableControllers(s.root, []string{c}) == nil {
				ok = append(ok, c)
			}
		}
		want = ok
	}
	s.controllers = want
}

// UserNamespaces reports whether every agent has a user namespace of its
// own: Config.UserNamespaces where the kernel allows it, and always with
// PID namespaces containment.
func (s *Supervisor) UserNamespaces() bool { return s.userns || s.pidns }

// DirectStarted is how many processes Start started without the shim
// (Spec.Direct) so far.
func (s *Supervisor) DirectStarted() int64 { return s.directStarts.Load() }

// DirectStarts reports whether Start honours Spec.Direct: with cgroup2
// containment, without user or PID namespaces.
func (s *Supervisor) DirectStarts() bool { return s.cg && !s.userns && !s.pidns }

// Controllers lists the cgroup controllers enabled down kin's tree (nil
// without cgroup containment): the subtree limits it can set.
func (s *Supervisor) Controllers() []string { return slices.Clone(s.controllers) }

// HasController reports whether controller c is enabled down kin's tree.
func (s *Supervisor) HasController(c string) bool { return slices.Contains(s.controllers, c) }

// MissingControllers lists the SubtreeControllers kin's tree lacks, and
// where they would have to be granted ("" without cgroup containment).
func (s *Supervisor) MissingControllers() (missing []string, parent string) {
	for _, c := range SubtreeControllers {
		if !slices.Contains(s.controllers, c) {
			missing = append(missing, c)
		}
	}
	if !s.cg {
		return missing, ""
	}
	return missing, filepath.Dir(s.root)
}

// kinRootAbove is the nearest kin root cgroup at or above dir (below the
// mount's top at top) and the home it names, or "".
func kinRootAbove(dir, top string) (root, owner string) {
	buf := make([]byte, 4096)
	for d := dir; within(d, top) && d != top; d = filepath.Dir(d) {
		if n, err := unix.Getxattr(d, RootXattr, buf); err == nil {
			return d, string(buf[:n])
		}
	}
	return "", ""
}

// Containment is "cgroup2", "pid-namespaces" or "process-groups".
func (s *Supervisor) Containment() string {
	switch {
	case s.cg:
		return ContainmentCgroup2
	case s.pidns:
		return ContainmentPIDNamespaces
	}
	return ContainmentProcessGroups
}

// ContainmentReason says why the fallback is in force ("" with cgroup2).
func (s *Supervisor) ContainmentReason() string { return s.reason }

// Root is the kin root cgroup directory ("" with process groups).
func (s *Supervisor) Root() string {
	if !s.cg {
		return ""
	}
	return s.root
}

func (s *Supervisor) sweeper(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.sigch:
			s.sweep()
		}
	}
}

func (s *Supervisor) rememberLocked(a *agent) {
	s.agents[a.id] = a
	s.paths[a.path] = a
}

func (s *Supervisor) forgetLocked(a *agent) {
	if s.agents[a.id] == a {
		delete(s.agents, a.id)
	}
	if s.paths[a.path] == a {
		delete(s.paths, a.path)
	}
	if a.ns != 0 && s.byNS[a.ns] == a {
		delete(s.byNS, a.ns)
	}
}

// subtreeLocked is a and every record nested in it.
func (s *Supervisor) subtreeLocked(a *agent) []*agent {
	out := []*agent{a}
	prefix := a.path + "/" // within's, made once: this runs under s.mu, over every record
	for _, b := range s.agents {
		if b != a && (b.path == a.path || strings.HasPrefix(b.path, prefix)) {
			out = append(out, b)
		}
	}
	return out
}

// Close stops the supervisor. Unless Config.KeepOnClose, it first stops
// every group (grace Config.CloseGrace) and removes the kin root. It waits
// for its goroutines and is safe to call more than once.
func (s *Supervisor) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Supervisor) close() error {
	s.mu.Lock()
	s.closed = true
	var starting []chan struct{}
	var outside []kin.AgentID
	for _, a := range s.agents {
		if a.starting != nil {
			starting = append(starting, a.starting)
		}
		if !within(a.path, s.root) && !s.nestedLocked(a) {
			outside = append(outside, a.id)
		}
	}
	s.mu.Unlock()
	for _, ch := range starting {
		<-ch
	}
	s.releaseHolds()
	s.removing.Wait() // no deferred removal races the root's

	var errs []error
	if !s.cfg.KeepOnClose {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseGrace+s.killTimeout)
		// Adopted groups of an earlier run's root first, then everything
		// under this root at once: one cgroup.kill at the root (whatever
		// else is in it, such as groups of an earlier run that were never
		// adopted, goes too: the root is this supervisor's).
		for _, id := range outside {
			if err := s.stop(ctx, id, s.cfg.CloseGrace); err != nil && !errors.Is(err, ErrUnknownAgent) {
				errs = append(errs, err)
			}
		}
		s.mu.Lock()
		all := make([]*agent, 0, len(s.agents))
		for _, a := range s.agents {
			all = append(all, a)
		}
		op := s.beginStopLocked(all)
		s.mu.Unlock()
		err := s.runStop(ctx, op, s.root, s.cfg.CloseGrace)
		s.endStop(op, err)
		errs = append(errs, err)
		cancel()
	}

	s.cancel()
	signal.Stop(s.sigch)
	// Abandon what still runs (no longer watched: a reap already under
	// way ends first); closing a pipe ends its copier.
	left := s.unwatch()
	s.reaping.Wait()
	s.mu.Lock()
	for r := range s.outs {
		r.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, p := range left {
		s.finishProcess(p, siginfoChild{}, unix.Rusage{}, false)
	}
	unwatchChildren()
	s.devnull.Close()
	if s.cfg.KeepOnClose && s.cg && s.root != "" {
		// Left in place for the next supervisor of this name, unless
		// nothing runs under it: then its groups are empty, the next one
		// makes its own, and a run that kept nothing leaves nothing (a
		// daemon run with --leave-running whose agents all ended).
		if ev, err := cgroup.ReadEvents(s.root); err == nil && !ev.Populated {
			if err := cgroup.RemoveTree(s.root); err != nil {
				s.log.Warn("remove the empty root group", "root", s.root, "err", err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("supervisor: close: %w", err)
	}
	return nil
}

// nestedLocked reports whether a lies inside another record's group.
func (s *Supervisor) nestedLocked(a *agent) bool {
	for d := filepath.Dir(a.path); d != "/" && d != "." && d != s.root; d = filepath.Dir(d) {
		if s.paths[d] != nil {
			return true
		}
	}
	return false
}
