package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/internal/template"
	"github.com/kin-agents/kin/kin"
)

// checkPermissionRequest validates what a registration asks of the
// permission authority, before anything is written: the policy (its mounts
// resolved to the files they name, and those files recorded: the agent
// gets those or nothing), the stage and the template.
func (run *Runner) checkPermissionRequest(req *kin.RegisterRequest) (map[string]authority.FileID, error) {
	ids, err := run.auth.CheckRequest(req)
	if err != nil {
		return nil, err
	}
	if req.Template != nil {
		if err := template.Check(*req.Template); err != nil {
			return nil, kin.Errorf(kin.ECodeInvalid, "%v", err)
		}
	}
	return ids, nil
}

// sandboxAvailable refuses an agent with restricted mounts where Landlock
// is missing, unless the operator allowed best effort.
func (run *Runner) sandboxAvailable() error {
	if sandbox.ABI() > 0 || run.cfg.SandboxBestEffort {
		return nil
	}
	return kin.Errorf(kin.ECodeSandbox, "the agent's policy restricts its mounts, and this kernel has no Landlock to enforce them; "+
		"kin refuses to start it unrestricted (start kin serve with --sandbox-best-effort to run such agents without the restriction)")
}

// sandboxArgv wraps every agent's command in the sandbox shim (issue 18:
// containment holds for every agent, not only those whose policy names
// mounts):
//
//   - with mounts, the agent sees exactly what they grant, the system
//     paths read-only, and what kin gives it (below);
//   - without, it sees the default view: everything but kin's own state
//     (the home, the agent filesystem), the cgroup2 mount read-only (an
//     agent sharing the daemon's uid could otherwise move itself out of
//     its group, or kill and freeze other agents' groups), plus what kin
//     gives it;
//   - what kin gives every agent: its own home (sessions and workspace),
//     its own socket, kin's binary, and what other agents consented to
//     show it (visibleTo);
//   - every agent is kept from signalling a process outside its own
//     Landlock domain (ABI 6), the daemon and other trees included;
//   - with PID namespaces the shim also stays as the namespace's init.
//
// Where the kernel has no Landlock, an agent without mounts runs without
// it (the start-up line says which guarantees are missing); one with
// mounts is refused unless best effort was allowed (sandboxAvailable).
//
// It also returns the groups of the owners whose workspaces the agent may
// read: the agent joins them so that the files' modes let it in, and
// Landlock keeps it to the consented paths. Only a sandboxed agent joins.
// And the policy's mounts, opened as checked (holdMounts): the process's
// descriptors 3 and up, for the caller to close once it started.
//
// And the spec itself (nil where the command runs without the shim), for
// a start without the shim (directStart).
func (run *Runner) sandboxArgv(a *kin.Agent, c *ctxAgent, argv []string, view *viewFuture) ([]string, []uint32, []*os.File, *sandbox.Spec, error) {
	used := false
	defer func() {
		if !used {
			view.discard()
		}
	}()
	layers, err := run.auth.Layers(a.ID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	flat := policy.Flatten(layers)
	abi := sandbox.ABI()
	asInit := run.sup.Containment() == supervisor.ContainmentPIDNamespaces
	lim := run.limitsFor(flat)
	if abi == 0 && flat.Mounts == nil && !authority.HasLimits(flat.Budget) && !asInit && lim.nproc == 0 && lim.addrSpace == 0 && run.cfg.AgentOpenFiles == nil {
		return argv, nil, nil, nil, nil
	}
	var groups []uint32
	spec := sandbox.Spec{Argv: argv, BestEffort: run.cfg.SandboxBestEffort, ScopeSignals: true, Init: asInit,
		MemoryBytes: lim.addrSpace, Processes: lim.nproc}
	if b := flat.Budget; b != nil {
		spec.CPUSeconds, spec.OpenFiles = deref(b.CPUSeconds), deref(b.OpenFiles)
	}
	if spec.OpenFiles == 0 {
		spec.InheritOpenFiles = run.cfg.AgentOpenFiles
	}
	if flat.Mounts != nil || abi > 0 {
		spec.Restrict = true
		if flat.Mounts != nil {
			// The policy's own mounts are held (holdMounts), not paths.
			spec.RO = append(spec.RO, run.systemRO()...)
			spec.RW = append(spec.RW, sandbox.DefaultSystemRW()...)
		} else {
			spec.All = true
			spec.Hidden = run.hiddenFromAgents
			spec.RO = append(spec.RO, run.readOnlyForAgents...)
		}
		o := run.agentOwner(a.ID)
		spec.RW = append(spec.RW, run.ctx.AgentHome(o.UID, a.Name))
		if run.agentPath != "" {
			spec.RO = append(spec.RO, filepath.Join(run.ctxDir, "bin"))
		}
		var seen []string
		seen, groups = run.visibleTo(a)
		spec.RO = append(spec.RO, seen...)
	}
	spec.RW, spec.RO = grants(spec.RW, spec.RO)
	if spec.Restrict {
		run.agentEntries(a, &spec)
	}
	held, err := run.auth.HoldMounts(layers, flat, &spec)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if f := view.take(run, a, &spec, groups); f != nil {
		used = true
		spec.ViewFD = 3 + len(held) // after the held grants' descriptors
		held = append(held, f)
	}
	args, err := sandbox.Args(spec)
	if err != nil {
		authority.CloseFiles(held)
		return nil, nil, nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	return append([]string{run.shimPath(), sandbox.Subcommand}, args...), groups, held, &spec, nil
}

// directStart prepares a start of spec without the shim (sandbox.Direct)
// where the supervisor can make one; nil leaves it to the shim. files are
// the shim's descriptors 3 and up; cred the agent's.
func (run *Runner) directStart(a *kin.Agent, spec *sandbox.Spec, files []*os.File, cred *syscall.Credential) supervisor.Direct {
	if spec == nil || !run.sup.DirectStarts() {
		return nil
	}
	d, err := sandbox.PrepareDirect(*spec, files, cred)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNeedsShim) {
			run.log.Debug("start without the shim", "agent", a.ID, "err", err)
		}
		return nil
	}
	return d
}

// agentEntries grants a its entries in agent/: its socket, and read-only
// like everything of kin's, its control files (seed 001: an agent reads
// its policy, mounts and status there; the modes let it read them and no
// other's) and its id file. They are kin's own paths, canonical by
// construction (agentDir): not resolved here, since served (ctxfuse) each
// resolution would be a lookup the daemon answers to itself from the
// store, and written (ctxsync.go) the control files may not be there yet
// (holdControl makes them first). Served, they are Optional: a daemon that
// dies, or loses its store, while the shim sets up cannot answer the
// shim's lookups, and the agent lives on without them rather than not at
// all (it is re-adopted by the next daemon).
func (run *Runner) agentEntries(a *kin.Agent, spec *sandbox.Spec) {
	l := ctxfs.Layout{Root: filepath.Dir(run.agentDir)} // the canonical ctx root
	// grant adds p to *to unless a grant in covered already holds it.
	grant := func(p string, to *[]string, covered ...[]string) {
		for _, c := range covered {
			if granted(p, c) {
				return
			}
		}
		*to = append(*to, p)
		if run.served != nil {
			spec.Optional = append(spec.Optional, p)
		}
	}
	grant(l.SocketPath(a.Name), &spec.RW, spec.RW)
	grant(l.ControlDir(a.Name), &spec.RO, spec.RW, spec.RO)
	grant(l.AgentFile(a.Name), &spec.RO, spec.RW, spec.RO)
}

// granted says whether p is one of dirs or beneath one.
func granted(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || d == "/" || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// viewFuture is the daemon's ruleset holding the default view for one
// agent's shim (sandbox.View), made beside the rest of the spawn's work
// (a few hundred Landlock rules where kin's home is under a busy /tmp) once
// the spawn began, so that it holds every entry made before.
type viewFuture struct {
	done chan struct{}
	uid  int
	gids []int
	f    *os.File
	err  error
}

// startView begins a's view ruleset, or returns nil where the daemon keeps
// no View or a runs as no user of its own.
func (run *Runner) startView(a *kin.Agent) *viewFuture {
	if run.view == nil {
		return nil
	}
	if flat, ok := run.auth.Flat(a.ID); ok && flat.Mounts != nil {
		return nil // its policy's own mounts, not the default view
	}
	cred := run.agentCredential(a.ID)
	if cred == nil {
		return nil
	}
	vf := &viewFuture{done: make(chan struct{}), uid: int(cred.Uid), gids: []int{int(cred.Gid)}}
	for _, g := range cred.Groups {
		vf.gids = append(vf.gids, int(g))
	}
	go func() {
		defer close(vf.done)
		fd, err := run.view.Ruleset(sandbox.ABI(), true, vf.uid, vf.gids)
		if err != nil {
			vf.err = err
			return
		}
		vf.f = os.NewFile(uintptr(fd), "landlock-view")
	}()
	return vf
}

// take returns the ruleset for spec, or nil where the shim walks the view
// itself: no View, another view than the View's, a View that cannot speak
// for the agent (readGroups included), or one that failed.
func (vf *viewFuture) take(run *Runner, a *kin.Agent, spec *sandbox.Spec, readGroups []uint32) *os.File {
	if vf == nil || !spec.All || !spec.ScopeSignals || !run.view.Matches(spec) {
		return nil
	}
	<-vf.done
	gids := slices.Clone(vf.gids)
	for _, g := range readGroups {
		gids = append(gids, int(g))
	}
	switch {
	case vf.err != nil:
		if !errors.Is(vf.err, sandbox.ErrViewNotShared) {
			run.log.Warn("the default view: its shim walks it", "agent", a.ID, "err", vf.err)
		}
		return nil
	case len(readGroups) > 0 && !run.view.SharedWith(vf.uid, gids):
		return nil
	}
	return vf.f
}

// discard closes a ruleset nobody took, once it is made.
func (vf *viewFuture) discard() {
	if vf == nil {
		return
	}
	go func() {
		<-vf.done
		if vf.f != nil {
			vf.f.Close()
		}
	}()
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// systemRO is the read-only system paths every sandboxed agent gets.
func (run *Runner) systemRO() []string {
	if run.cfg.SandboxRO != nil {
		return run.cfg.SandboxRO
	}
	return sandbox.DefaultSystemRO()
}

// shimPath is the binary that applies the sandbox: the one configured,
// else the lean shim (package leanshim), else the published kin binary
// agents may execute, else the daemon's own.
func (run *Runner) shimPath() string {
	if run.cfg.ShimPath != "" {
		return run.cfg.ShimPath
	}
	if run.leanShim != "" {
		return run.leanShim
	}
	if run.agentPath != "" {
		if p := filepath.Join(run.ctxDir, "bin", "kin"); fileExists(p) {
			return p
		}
	}
	if run.shimCopy != "" {
		return run.shimCopy
	}
	exe, _ := os.Executable()
	return exe
}

// publishShim puts the daemon's own binary where every agent's uid may
// execute it, <ctx>/bin/.kin-shim, when it is not published as kin (a
// binary not named kin, such as a test's): every agent starts through it,
// as its own uid, and a binary in a private directory (go test's, go
// run's) would not start. A hard link where it can, a copy otherwise.
func (run *Runner) publishShim() {
	if run.cfg.ShimPath != "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	dst := filepath.Join(run.ctxDir, "bin", ".kin-shim")
	tmp := dst + ".new"
	os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyExecutable(exe, tmp); err != nil {
			run.log.Warn("publish the sandbox shim for agents", "err", err)
			return
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil || os.Rename(tmp, dst) != nil {
		os.Remove(tmp)
		return
	}
	run.shimCopy = dst
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// workspaceOf is the workspace directory of a.
func (run *Runner) workspaceOf(a *kin.Agent) string {
	return run.ctx.WorkspaceDir(run.agentOwner(a.ID).UID, a.Name)
}

// provisionWorkspace writes a template into a new agent's workspace (seed
// 003 §3), its placeholders replaced.
func (run *Runner) provisionWorkspace(ctx context.Context, a *kin.Agent, t *kin.Template) error {
	vals := map[string]string{"AGENT_NAME": a.Name, "ROLE": a.Role, "RESPONSIBLE": a.Responsible, "PARENT": "", "PARENT_A": ""}
	if a.Parent != 0 {
		p, err := run.store.AgentGetByID(ctx, a.Parent)
		if err != nil {
			return run.storeError(err)
		}
		vals["PARENT"], vals["PARENT_A"] = p.Name, p.Name
	}
	files, err := template.Render(*t, vals)
	if err != nil {
		return kin.Errorf(kin.ECodeInvalid, "agent %d was registered, but its template could not be rendered: %v", a.ID, err)
	}
	o := run.agentOwner(a.ID)
	dir, err := run.ctx.MakeWorkspace(o, a.Name)
	if err != nil {
		return kin.Errorf(kin.ECodeInternal, "agent %d was registered, but its workspace could not be made: %v", a.ID, err)
	}
	if err := template.Write(dir, files, o.UID, o.GID); err != nil {
		return kin.Errorf(kin.ECodeInvalid, "agent %d was registered, but its template could not be written: %v", a.ID, err)
	}
	return nil
}

// visibleTo is what a sandboxed reader may read of other agents'
// workspaces, for Landlock: each consenting owner's files and folders
// that both scopes match, as they exist when the reader starts; and the
// groups of those owners.
func (run *Runner) visibleTo(a *kin.Agent) ([]string, []uint32) {
	v := run.auth.Visibility(a.ID)
	if v == nil || len(v.ReadFrom) == 0 {
		return nil, nil
	}
	var out []string
	var groups []uint32
	for _, ref := range v.ReadFrom {
		owner, err := run.reg.AgentByRef(context.Background(), ref)
		if err != nil || owner.ID == a.ID {
			continue
		}
		ov := run.auth.Visibility(owner.ID)
		ws := run.workspaceOf(owner)
		before := len(out)
		_ = filepath.WalkDir(ws, func(p string, e os.DirEntry, err error) error {
			if err != nil || p == ws {
				return nil
			}
			if e.Type()&os.ModeSymlink != 0 {
				return nil
			}
			rel, _ := filepath.Rel(ws, p)
			if e.IsDir() {
				// A folder whole: when "<rel>/**" is within both scopes,
				// grant it (files made later included) and skip its walk.
				if policy.CanRead(a.Name, a.ID, v, owner.Name, owner.ID, ov, rel+"/**").Allowed {
					out = append(out, p)
					return filepath.SkipDir
				}
				return nil
			}
			if policy.CanRead(a.Name, a.ID, v, owner.Name, owner.ID, ov, rel).Allowed {
				out = append(out, p)
			}
			return nil
		})
		if len(out) > before {
			if c := run.agentCredential(owner.ID); c != nil && !slices.Contains(groups, c.Gid) {
				groups = append(groups, c.Gid)
			}
		}
	}
	return out, groups
}

// grants makes kin's own grants canonical (links resolved, missing
// paths dropped) and minimal: a path already inside an rw grant needs no
// grant of its own (and Landlock, which unions grants, could not make it
// narrower anyway).
func grants(rw, ro []string) ([]string, []string) {
	canon := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if r, err := filepath.EvalSymlinks(p); err == nil && !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
		return out
	}
	rw, ro = canon(rw), canon(ro)
	inside := func(p string, dirs []string, self bool) bool {
		for _, d := range dirs {
			if (self && p == d) || p != d && (d == "/" || strings.HasPrefix(p, d+"/")) {
				return true
			}
		}
		return false
	}
	var rwOut, roOut []string
	for _, p := range rw {
		if !inside(p, rw, false) {
			rwOut = append(rwOut, p)
		}
	}
	for _, p := range ro {
		if !inside(p, rwOut, true) && !inside(p, ro, false) {
			roOut = append(roOut, p)
		}
	}
	return rwOut, roOut
}
