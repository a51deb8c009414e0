package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The agent filesystem of seed 001 as the daemon keeps it (package ctxfs
// owns the formats). What must exist before an agent's process starts is
// made in its spawn: its session (the process's working directory and
// $KIN_SESSION), its handoff, and its folder in the parent's session. The
// control files, session states, events.jsonl and the parents' status files
// follow the store from the background writer in ctxsync.go.

// ctxAgent is what the daemon knows of one agent's place in the tree.
type ctxAgent struct {
	session  ctxfs.Session // zero Agent: none
	parent   ctxfs.Session // the parent's session; zero Agent: none
	childDir string        // the folder's name in the parent's context/child/
	// rt is the control values beyond kin.Agent, but for what runtime
	// derives from the agent's id and session when derived is set (its
	// log's path, and its working directory when that is its session's):
	// those strings are not kept for every live agent (some 170 bytes an
	// agent, issue 22's memory). Read it with runtime.
	rt      ctxfs.Runtime
	derived bool
	// contract is its handoff's; nil: the default (no handoff). A pointer
	// keeps the record in the 512-byte size class (was 640 with the
	// contract inline and a default one allocated for every agent).
	contract    *handoff.Contract
	hasHandoff  bool
	inputRefs   []string // the paths of its input refs
	resultChan  bool     // it hands a result back (kin.Agent.Result is set)
	lastSeq     int64
	seqKnown    bool
	state       kin.State        // last written to the session's state file
	childStatus kin.ResultStatus // last written to the parent's status file
	msgSeq      map[string]int64 // by session: the last message appended to its messages.jsonl

	// remoteParent is the host of its parent, when that is another host
	// of the fleet and the parent has a session: the result is checked
	// here and kept in FleetHandoffDir for that host to fetch.
	remoteParent string
	// fetch is the fetch of the result of a child on another host whose
	// parent runs here (closed when it is installed or given up); nil
	// until one starts.
	fetch chan struct{}
}

// agentOwner is who owns agent id's files: the uid and gid it runs as.
func (run *Runner) agentOwner(id kin.AgentID) ctxfs.Owner {
	if c := run.agentCredential(id); c != nil {
		return ctxfs.Owner{UID: int(c.Uid), GID: int(c.Gid)}
	}
	return ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
}

// runID names an agent's run in parent references ("run:r7").
func runID(id kin.AgentID) string { return "r" + id.String() }

// parseHandoff validates a spawn's handoff wholly, before anything is
// created, and returns it in the handoff package's form.
func parseHandoff(h *kin.Handoff) (handoff.Handoff, error) {
	out := handoff.Handoff{Task: h.Task}
	for _, r := range h.Refs {
		out.Refs = append(out.Refs, handoff.Ref{Path: r.Path, Hash: r.Hash, Kind: r.Kind, Summary: r.Summary})
	}
	if len(h.Contract) > 0 {
		c, err := handoff.ParseContract(h.Contract)
		if err != nil {
			return handoff.Handoff{}, kin.Errorf(kin.ECodeInvalid, "handoff: %v", err)
		}
		out.Contract = c
	} else {
		out.Contract = handoff.DefaultContract()
	}
	if err := out.Validate(); err != nil {
		return handoff.Handoff{}, kin.Errorf(kin.ECodeInvalid, "handoff: %v", err)
	}
	return out, nil
}

// handoffOf reads back and validates a stored handoff (nil: none).
func handoffOf(raw []byte) (*handoff.Handoff, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var hk kin.Handoff
	if err := json.Unmarshal(raw, &hk); err != nil {
		return nil, fmt.Errorf("stored handoff: %w", err)
	}
	h, err := parseHandoff(&hk)
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// prepareCtx makes what an agent's process needs before it starts: its
// session (with its handoff in context/) and, when its parent has a
// session, its folder in the parent's context/child/. It returns the
// agent's place in the tree and the environment and working directory
// the process gets. key, when not nil, is the agent's private key for its
// session (ctxfs.FileAgentKey).
func (run *Runner) prepareCtx(ctx context.Context, a *kin.Agent, spec store.ProcessSpec, sock string, key []byte) (*ctxAgent, []string, string, error) {
	c := &ctxAgent{}
	h, err := handoffOf(spec.Handoff)
	if err != nil {
		return nil, nil, "", err
	}
	c.setHandoff(h)
	var parentRef ctxfs.ParentRef
	if a.Parent != 0 {
		run.ctxMu.Lock()
		pc := run.ctxAgents[a.Parent] // a parent started by this daemon, recorded or not yet
		run.ctxMu.Unlock()
		if pc != nil && pc.session.Agent != "" {
			c.parent = pc.session
			parentRef = ctxfs.ParentRef{Agent: pc.session.Agent, Session: pc.session.ID, Run: runID(a.Parent)}
		} else {
			p, err := run.store.AgentGetByID(ctx, a.Parent)
			if err != nil {
				return nil, nil, "", fmt.Errorf("parent %d: %w", a.Parent, err)
			}
			parentRef = ctxfs.ParentRef{Agent: p.Name, Session: p.Session, Run: runID(p.ID)}
			// A parent on another host of the fleet has its session there:
			// its host makes the child's folder in it, and fetches the
			// result this host checks (fleethandoff.go).
			switch {
			case p.Session == "":
			case run.ownsAgent(p):
				c.parent = ctxfs.Session{Owner: run.agentOwner(p.ID), Agent: p.Name, ID: p.Session}
			default:
				c.remoteParent = p.Host
			}
		}
	}
	c.resultChan = c.parent.Agent != "" || c.hasHandoff || c.remoteParent != ""

	task, files, err := run.handoffFiles(a, spec.Handoff)
	if err != nil {
		return nil, nil, "", kin.Errorf(kin.ECodeInvalid, "handoff: %v", err)
	}
	sp := ctxfs.SessionParams{
		AgentID: a.ID, Run: runID(a.ID), Parent: parentRef, State: a.State,
		Handoff: task, Context: files, Output: c.resultChan, Now: run.now(), Key: key,
	}
	for _, sid := range []string{ctxfs.DefaultSession, "s" + a.ID.String()} {
		sp.Session = ctxfs.Session{Owner: run.agentOwner(a.ID), Agent: a.Name, ID: sid}
		sp.Cwd = run.agentCwd(spec, sp.Session)
		if err = run.ctx.CreateSession(sp); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("session: %w", err)
	}
	c.session = sp.Session
	c.state = a.State

	if c.parent.Agent != "" {
		cp := ctxfs.ChildParams{Parent: c.parent, ChildID: a.ID, ChildSession: c.session.ID, Handoff: task}
		for _, name := range childDirNames(a) {
			cp.Child = name
			if err = run.ctx.CreateChildDir(cp); !errors.Is(err, fs.ErrExist) {
				break
			}
		}
		if err != nil {
			return nil, nil, "", fmt.Errorf("the parent's context/child: %w", err)
		}
		c.childDir = cp.Child
		c.childStatus = kin.ResultRunning
	}
	c.rt.Parent = parentRef
	run.setRuntime(c, a, spec, sock)
	return c, run.ctxEnv(a, c), sp.Cwd, nil
}

// setHandoff records what an agent's handoff (nil: none) says of its place
// in the tree: the contract its result is checked against, its input refs,
// and the mount and policy subsets its control files show.
func (c *ctxAgent) setHandoff(h *handoff.Handoff) {
	c.contract = nil
	if h == nil {
		return
	}
	contract := h.Contract
	c.hasHandoff, c.contract = true, &contract
	for _, r := range h.Refs {
		c.inputRefs = append(c.inputRefs, r.Path)
	}
}

// agentCwd is where a spawned agent's process starts: the spawn's dir, else
// its session.
func (run *Runner) agentCwd(spec store.ProcessSpec, s ctxfs.Session) string {
	if spec.Dir != "" || s.Agent == "" {
		return spec.Dir
	}
	return run.ctx.Dir(s)
}

// ctxEnv is the agent filesystem's part of a spawned agent's environment.
func (run *Runner) ctxEnv(a *kin.Agent, c *ctxAgent) []string {
	if c.session.Agent == "" {
		return nil
	}
	dir := run.ctx.Dir(c.session)
	env := []string{ctxfs.EnvCtx + "=" + run.ctx.Root, ctxfs.EnvSession + "=" + dir,
		ctxfs.EnvAgentKey + "=" + filepath.Join(dir, ctxfs.FileAgentKey)}
	if c.hasHandoff {
		env = append(env, ctxfs.EnvHandoff+"="+filepath.Join(dir, "context", handoff.FileHandoff))
	}
	if c.resultChan {
		env = append(env, ctxfs.EnvOutput+"="+run.ctx.OutputDir(c.session.UID, a.Name, c.session.ID))
	}
	return env
}

// setRuntime fills the control values of a spawned agent that come from
// the daemon and its spawn: how it runs, where, with what environment.
func (run *Runner) setRuntime(c *ctxAgent, a *kin.Agent, spec store.ProcessSpec, sock string) {
	o := run.agentOwner(a.ID)
	c.rt.UID, c.rt.GID = o.UID, o.GID
	c.rt.Policy, _, c.rt.Mount = run.auth.Control(a.ID)
	c.rt.Iso, c.rt.Path = run.sup.Containment(), run.agentPathList
	c.rt.Cwd, c.derived = spec.Dir, true // run.agentCwd(spec, c.session), Log: run.logPath(a.ID)
	c.rt.Env = run.sharedEnvKeys(append(run.agentEnv(a, sock, "", spec.Env), run.ctxEnv(a, c)...))
}

// runtime is c.rt with what setRuntime left to derive filled in: the
// control values of agent id beyond kin.Agent. The caller holds ctxMu.
func (run *Runner) runtime(c *ctxAgent, id kin.AgentID) ctxfs.Runtime {
	rt := c.rt
	if c.derived {
		rt.Log = run.logPath(id)
		rt.Cwd = run.agentCwd(store.ProcessSpec{Dir: rt.Cwd}, c.session)
	}
	return rt
}

// maxEnvShapes bounds the lists of environment names sharedEnvKeys keeps
// to share: agents' environments come in a few shapes (with or without a
// handoff, a result, a resume cursor, a spawner's own variables).
const maxEnvShapes = 16

// sharedEnvKeys is the names of env (KEY=VALUE each), in its order, for an
// agent's env control file: the slice an earlier agent got when the names
// are the same (they mostly are: the same variables, other values), else a
// new one holding copies of the names only. Keeping the names as they were
// cut from env kept every agent's whole environment in memory (some 700
// bytes an agent: issue 22's memory). It remembers up to maxEnvShapes
// lists: remembering only the last one, agents of two shapes spawned
// alternately (concurrent spawns) got a list each (a third of 2,000
// agents did, some 100 bytes an agent).
func (run *Runner) sharedEnvKeys(env []string) []string {
	run.envKeysMu.Lock()
	defer run.envKeysMu.Unlock()
	for _, keys := range run.envKeys {
		if sameEnvKeys(env, keys) {
			return keys
		}
	}
	keys := make([]string, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys[i] = strings.Clone(k)
	}
	if len(run.envKeys) < maxEnvShapes {
		run.envKeys = append(run.envKeys, keys)
	}
	return keys
}

// sameEnvKeys reports whether env (KEY=VALUE each) has the names keys, in
// that order.
func sameEnvKeys(env, keys []string) bool {
	if len(env) != len(keys) {
		return false
	}
	for i, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != keys[i] {
			return false
		}
	}
	return true
}

// childDirNames are the names an agent's folder in its parent's
// context/child/ may take: its name, or when an earlier agent of that name
// has the folder, its name and id.
func childDirNames(a *kin.Agent) []string {
	alt := a.Name + "." + a.ID.String()
	if len(alt) > kin.MaxNameLen {
		alt = "agent-" + a.ID.String()
	}
	return []string{a.Name, alt}
}

// findChildDir finds which of childDirNames is a's folder: the one whose
// agent file holds its id.
func (run *Runner) findChildDir(parent ctxfs.Session, a *kin.Agent) (string, bool) {
	for _, name := range childDirNames(a) {
		b, err := run.ctx.ReadFile(filepath.Join(run.ctx.ChildDir(parent.UID, parent.Agent, parent.ID, name), ctxfs.FileChildAgent), 64)
		if err == nil && strings.TrimSpace(string(b)) == a.ID.String() {
			return name, true
		}
	}
	return "", false
}

// ctxAgentOf returns what the daemon knows of a's place in the tree,
// rebuilding it from the store for an agent this daemon did not start.
func (run *Runner) ctxAgentOf(ctx context.Context, a *kin.Agent) *ctxAgent {
	return run.ctxAgentWith(ctx, a, nil)
}

// parentsOf reads, in one read, the parents of the agents whose places
// are not known yet (ctxAgentWith reads an agent's parent when it makes
// its place), with the agents themselves: the agent filesystem's writer
// makes the places of a batch of new agents without a read for each.
func (run *Runner) parentsOf(ctx context.Context, agents []*kin.Agent) map[kin.AgentID]*kin.Agent {
	known := make(map[kin.AgentID]*kin.Agent, len(agents))
	for _, a := range agents {
		known[a.ID] = a
	}
	var want []kin.AgentID
	wanted := map[kin.AgentID]bool{}
	run.ctxMu.Lock()
	for _, a := range agents {
		if a.Parent != 0 && run.ctxAgents[a.ID] == nil && known[a.Parent] == nil && !wanted[a.Parent] {
			wanted[a.Parent] = true
			want = append(want, a.Parent)
		}
	}
	run.ctxMu.Unlock()
	if len(want) > 1 { // one parent costs the read ctxAgentWith would make anyway
		if ps, err := run.store.AgentListByIDs(ctx, want); err == nil {
			for _, p := range ps {
				known[p.ID] = p
			}
		}
	}
	return known
}

// ctxAgentWith is ctxAgentOf, the parent taken from known when it holds
// it (read in the same read as the agent: as current).
func (run *Runner) ctxAgentWith(ctx context.Context, a *kin.Agent, known map[kin.AgentID]*kin.Agent) *ctxAgent {
	run.ctxMu.Lock()
	c := run.ctxAgents[a.ID]
	run.ctxMu.Unlock()
	if c != nil {
		return c
	}
	c = &ctxAgent{resultChan: a.Result != ""}
	own := run.ownsAgent(a)
	o := run.agentOwner(a.ID)
	c.rt.UID, c.rt.GID = o.UID, o.GID
	// Another host's agent has its session there: here it has at most its
	// folder in a parent's session (fleethandoff.go).
	if a.Session != "" && own {
		c.session = ctxfs.Session{Owner: o, Agent: a.Name, ID: a.Session}
	}
	c.setHandoff(nil)
	// Only a spawn stores a process spec (its command, env, dir, handoff):
	// a registered agent's is empty, and another host's is that host's to
	// use; neither is read (a round trip on a server's store).
	var spec store.ProcessSpec
	var err error
	if own && len(a.Command) > 0 {
		spec, err = run.store.AgentProcessSpec(ctx, a.ID)
	}
	if err == nil && own {
		if hk, err := handoffOf(spec.Handoff); err == nil {
			c.setHandoff(hk)
		}
		run.setRuntime(c, a, spec, run.socks.Path(a.Name))
	}
	if a.Parent != 0 {
		p, err := known[a.Parent], error(nil)
		if p == nil {
			p, err = run.store.AgentGetByID(ctx, a.Parent)
		}
		if err == nil {
			c.rt.Parent = ctxfs.ParentRef{Agent: p.Name, Session: p.Session, Run: runID(p.ID)}
			switch {
			case p.Session == "" || a.Result == "":
			case run.ownsAgent(p):
				c.parent = ctxfs.Session{Owner: run.agentOwner(p.ID), Agent: p.Name, ID: p.Session}
				c.childDir, _ = run.findChildDir(c.parent, a)
			case own:
				c.remoteParent = p.Host
			}
		}
	}
	run.ctxMu.Lock()
	if have := run.ctxAgents[a.ID]; have != nil {
		c = have
	} else {
		run.ctxAgents[a.ID] = c
	}
	run.ctxMu.Unlock()
	return c
}

// rememberCtx records the place of an agent this daemon started.
func (run *Runner) rememberCtx(id kin.AgentID, c *ctxAgent) {
	run.ctxMu.Lock()
	run.ctxAgents[id] = c
	run.ctxMu.Unlock()
}

// resultDir is where an agent's result is kept: its folder in its parent's
// session, or its own output/ when it has no parent session.
func (run *Runner) resultDir(a *kin.Agent, c *ctxAgent) string {
	if c.remoteParent != "" {
		return run.ctx.FleetHandoffDir(a.ID.String())
	}
	if c.parent.Agent != "" && c.childDir != "" {
		return run.ctx.ChildDir(c.parent.UID, c.parent.Agent, c.parent.ID, c.childDir)
	}
	if c.session.Agent != "" {
		return run.ctx.OutputDir(c.session.UID, a.Name, c.session.ID)
	}
	return ""
}

// openRoot opens the directory at path beneath the ctx root as an os.Root
// without following a link on the way there: agents own their sessions
// and could plant one for the daemon, which runs as root, to follow.
func (run *Runner) openRoot(path string) (*os.Root, error) {
	f, err := run.ctx.OpenDir(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return os.OpenRoot("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))) // the directory f is, whatever path names now
}
