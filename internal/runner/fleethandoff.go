package runner

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// A handoff across hosts (issue 24; seed 001's "child to parent" when the
// child runs on host B and its parent on host A). B, which runs the child,
// does what one host does up to the copy: at the child's end it copies the
// child's output/ into a folder of kin's own (ctxfs.FleetHandoffDir), checks
// that copy against the contract (its refs against the files on B, the only
// host that has them), writes the refs with the hashes kin computed, and
// records the result's status and violations in the store (agent.result).
// A, which runs the parent, follows the log: it makes the child's folder in
// the parent's context/child/ once the child runs, and when the child's
// result is final fetches the checked copy from B's API (a tar of
// result.md, refs.jsonl and artifact/, peer-signed) into a folder of its
// own, installs it in the folder with ctxfs.CopyResult (the same bounds as
// on one host: ctxfs.Options' MaxResultBytes and MaxResultFiles, 256 MiB
// and 10,000 files by default, enforced while unpacking too) and writes the
// status. So the parent's folder ends with the same files and status as on
// one host.

// fetchRetry bounds the wait between two attempts to fetch a result from
// a host that did not give it.
const fetchRetry = 30 * time.Second

// makeFleetHandoff makes dir when it is the folder where c's checked
// result is kept for its parent's host.
func (run *Runner) makeFleetHandoff(c *ctxAgent, dir string) (bool, error) {
	if c.remoteParent == "" {
		return false, nil
	}
	return true, run.ctx.MakeFleetDir(dir)
}

// OpenHandoff opens the checked copy of the final result of agent id,
// which runs here and whose parent runs on another host, for that host
// (a peer) or the operator; nil when nothing was kept.
func (run *Runner) OpenHandoff(ctx context.Context, id kin.AgentID) (*os.Root, error) {
	if err := caller.OperatorOnly(ctx, "fetch a child's result for its parent's host"); err != nil {
		return nil, err
	}
	a, err := run.store.AgentGetByID(ctx, id)
	if err != nil {
		return nil, run.agentError(err, id)
	}
	if !run.ownsAgent(a) {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d runs on host %s, not on %s", id, a.Host, run.cfg.Host)
	}
	c := run.ctxAgentOf(ctx, a)
	if c.remoteParent == "" {
		return nil, kin.Errorf(kin.ECodeInvalid, "agent %d hands no result to a parent on another host", id)
	}
	if !a.Result.Ended() {
		return nil, kin.Errorf(kin.ECodeConflict, "agent %d's result is not final yet (%s)", id, a.Result)
	}
	root, err := run.openRoot(run.ctx.FleetHandoffDir(id.String()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // it ended with nothing kept (cancelled): its folder gets only its status
	}
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInternal, "agent %d's checked result on host %s: %v", id, run.cfg.Host, err)
	}
	return root, nil
}

// WriteHandoff writes the result in root (OpenHandoff) to w as a tar:
// directories and regular files only, within the result copy's bounds.
func (run *Runner) WriteHandoff(root *os.Root, w io.Writer) error {
	maxBytes, maxFiles := run.ctx.ResultLimits()
	tw := tar.NewWriter(w)
	if root == nil {
		return tw.Close()
	}
	var total int64
	files := 0
	err := fs.WalkDir(root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: p, Mode: 0o600, ModTime: info.ModTime(), Format: tar.FormatPAX}
		switch {
		case e.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, p+"/", 0o700
			return tw.WriteHeader(h)
		case !e.Type().IsRegular():
			return nil // the copy holds none: kin made it
		}
		files++
		total += info.Size()
		if files > maxFiles || total > maxBytes {
			return fmt.Errorf("the result is past %d files or %d bytes", maxFiles, maxBytes)
		}
		f, err := root.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// remoteChild keeps the folder, in its parent's session here, of a child
// that runs on another host: made once the child runs, filled with its
// result once that is final.
func (run *Runner) remoteChild(ctx context.Context, a *kin.Agent) {
	if a.Parent == 0 || a.Result == "" || a.Session == "" || run.cfg.Remote == nil {
		return
	}
	run.remoteMu.Lock()
	defer run.remoteMu.Unlock()
	c := run.ctxAgentOf(ctx, a)
	if c.parent.Agent == "" {
		return // its parent is not this host's, or has no session
	}
	run.ctxMu.Lock()
	dir, fetching := c.childDir, c.fetch != nil
	run.ctxMu.Unlock()
	if dir == "" {
		spec, err := run.store.AgentProcessSpec(ctx, a.ID)
		if err != nil {
			run.log.Warn("handoff across hosts: the child's spawn", "agent", a.ID, "err", err)
			return
		}
		task, _, err := run.handoffFiles(a, spec.Handoff)
		if err != nil {
			run.log.Warn("handoff across hosts: the child's handoff", "agent", a.ID, "err", err)
		}
		cp := ctxfs.ChildParams{Parent: c.parent, ChildID: a.ID, ChildSession: a.Session, Handoff: task}
		for _, name := range childDirNames(a) {
			cp.Child = name
			if err = run.ctx.CreateChildDir(cp); !errors.Is(err, fs.ErrExist) {
				break
			}
		}
		if err != nil {
			run.log.Warn("handoff across hosts: the child's folder", "agent", a.ID, "err", err)
			return
		}
		run.ctxMu.Lock()
		c.childDir, c.childStatus = cp.Child, kin.ResultRunning
		run.ctxMu.Unlock()
	}
	if !a.Result.Ended() || fetching {
		return
	}
	run.ctxMu.Lock()
	c.fetch = make(chan struct{})
	run.ctxMu.Unlock()
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		defer close(c.fetch)
		run.fetchHandoff(a, c)
	}()
}

// resumeFetches, at start, fetches the results of the children on other
// hosts of this host's agents that became final while no fetch here
// finished (this daemon was down, or stopped during one): those whose
// folder's status is not yet the store's. Only on a fleet of several
// hosts; it reads every agent with a parent once.
func (run *Runner) resumeFetches(ctx context.Context) {
	if run.cfg.Remote == nil || run.cfg.Host == "" {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-run.closing:
		case <-ctx.Done():
		}
		cancel()
	}()
	if hosts, err := run.store.HostList(ctx); err != nil || len(hosts) < 2 {
		return
	}
	// Every agent (HasParent with Parent 0 would select the roots only,
	// which have no parent to fetch for).
	all, err := run.store.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		run.log.Warn("handoff across hosts: resume fetches", "err", err)
		return
	}
	var cands []*kin.Agent
	var parents []kin.AgentID
	for _, a := range all {
		if a.Parent != 0 && !run.ownsAgent(a) && a.Result.Ended() && a.Session != "" {
			cands, parents = append(cands, a), append(parents, a.Parent)
		}
	}
	if len(cands) == 0 {
		return
	}
	ps, err := run.store.AgentListByIDs(ctx, parents)
	if err != nil {
		run.log.Warn("handoff across hosts: resume fetches", "err", err)
		return
	}
	mine := map[kin.AgentID]bool{}
	for _, p := range ps {
		mine[p.ID] = run.ownsAgent(p) && p.Session != ""
	}
	for _, a := range cands {
		if !mine[a.Parent] || ctx.Err() != nil {
			continue
		}
		c := run.ctxAgentOf(ctx, a)
		run.ctxMu.Lock()
		dir := c.childDir
		run.ctxMu.Unlock()
		if dir != "" && c.parent.Agent != "" {
			if st, err := run.ctx.ChildStatusOf(c.parent, dir); err == nil && string(st) == string(a.Result) {
				continue // installed before
			}
		}
		run.remoteChild(ctx, a)
	}
}

// fetchHandoff fetches a's checked result from its host and installs it,
// trying again (after 1 s, then longer, up to fetchRetry) while that host
// does not give it, until the daemon closes.
func (run *Runner) fetchHandoff(a *kin.Agent, c *ctxAgent) {
	for wait := time.Second; ; wait = min(2*wait, fetchRetry) {
		err := run.fetchOnce(a, c)
		if err == nil {
			return
		}
		run.log.Warn("handoff across hosts: fetch the child's result", "agent", a.ID, "host", a.Host, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-run.closing:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (run *Runner) fetchOnce(a *kin.Agent, c *ctxAgent) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-run.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	body, err := run.cfg.Remote.Handoff(ctx, a.Host, a.ID)
	if err != nil {
		return err
	}
	defer body.Close()
	var tag [8]byte
	rand.Read(tag[:])
	in := run.ctx.FleetIncomingDir(a.ID.String() + "-" + hex.EncodeToString(tag[:]))
	if err := run.ctx.MakeFleetDir(in); err != nil {
		return err
	}
	defer run.ctx.RemoveFleetDir(in)
	root, err := run.openRoot(in)
	if err != nil {
		return err
	}
	err = run.unpackHandoff(body, root)
	root.Close()
	if err != nil {
		return fmt.Errorf("from host %s: %w", a.Host, err)
	}
	if _, err := run.ctx.CopyResult(in, run.resultDir(a, c)); err != nil {
		return err
	}
	cur, err := run.store.AgentGetByID(ctx, a.ID)
	if err != nil {
		return err
	}
	run.setChildStatus(c, cur.Result)
	return nil
}

// unpackHandoff unpacks a tar of a result (WriteHandoff's) into root:
// result.md, refs.jsonl and what is under artifact/, directories and
// regular files only, within the result copy's bounds.
func (run *Runner) unpackHandoff(r io.Reader, root *os.Root) error {
	maxBytes, maxFiles := run.ctx.ResultLimits()
	tr := tar.NewReader(r)
	var total int64
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		if !fs.ValidPath(name) || name == "." {
			return fmt.Errorf("the result names %q", h.Name)
		}
		top, _, _ := strings.Cut(name, "/")
		switch {
		case top != handoff.FileResult && top != handoff.FileRefs && top != "artifact":
			return fmt.Errorf("the result holds %q: only %s, %s and artifact/", name, handoff.FileResult, handoff.FileRefs)
		case strings.Count(name, "/") > ctxfs.MaxResultDepth:
			return fmt.Errorf("the result's %q is nested deeper than %d", name, ctxfs.MaxResultDepth)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("the result's %q is neither a file nor a directory", name)
		}
		files++
		total += h.Size
		if files > maxFiles || h.Size < 0 || total > maxBytes {
			return fmt.Errorf("the result is past %d files or %d bytes", maxFiles, maxBytes)
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o700); err != nil {
				return err
			}
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, tr, h.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// awaitFetch waits, for a child on another host whose parent runs here,
// until its result is in the parent's folder (or given up at shutdown).
func (run *Runner) awaitFetch(ctx context.Context, id kin.AgentID) error {
	run.ctxMu.Lock()
	var ch chan struct{}
	if c := run.ctxAgents[id]; c != nil {
		ch = c.fetch
	}
	run.ctxMu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-run.closing:
		return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
	}
}
