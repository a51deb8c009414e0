package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kin-agents/kin/internal/agentsock"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// EnvCtxDisk, set to 1, makes a root daemon write the control files to
// disk as an ordinary user's does, instead of serving them (tests run both
// ways with it).
const EnvCtxDisk = "KIN_CTX_DISK"

// serveControl decides, once at start, how <ctx>/agent's control files
// reach agents: served from the store through FUSE (package ctxfuse) where
// the daemon runs as root with /dev/fuse, else written to disk by the
// writer (ctxsync.go). A failed mount falls back to the disk, saying why.
func (run *Runner) serveControl() {
	why := ""
	switch err := ctxfuse.Available(); {
	case os.Getenv(EnvCtxDisk) == "1":
		why = EnvCtxDisk + "=1"
	case err != nil:
		why = err.Error()
	}
	dir := run.ctx.AgentDir()
	if why == "" {
		src := &ctlSource{run: run}
		m, err := ctxfuse.New(dir, src, run.log)
		if err == nil {
			run.served, run.ctlSrc = m, src
			run.sockMount.Store(m)
			run.log.Info("agent filesystem: control files served from the store (FUSE)", "dir", dir)
			return
		}
		why = err.Error()
	}
	run.log.Info("agent filesystem: control files written to disk", "dir", dir, "because", why)
}

// removeSocket removes an agent's socket file at path on the served
// agent/ without a FUSE request (ctxfuse's RemoveSocket): false where the
// control files are not served, or no more.
func (run *Runner) removeSocket(path string) bool {
	m := run.sockMount.Load()
	return m != nil && m.RemoveSocket(path)
}

// ServedControl reports whether the control files are served (FUSE)
// rather than written.
func (run *Runner) ServedControl() bool { return run.served != nil }

// unserveControl unmounts the served control files (Close).
func (run *Runner) unserveControl() error {
	if run.served == nil {
		return nil
	}
	err := run.served.Close()
	run.served = nil
	return err
}

// holdControl makes agent/<name> and agent/<name>.d what they will be for
// a's life before its process starts, so that the shim's grants on them
// (agentEntries) hold. Served, it notes a as its name's agent (its entries
// are looked up without the store from then on). Written to disk, it
// writes a's control files now where they are not there yet (a new name:
// the writer, behind the store, would make them only after the shim looked
// for them, and the agent would never read them), or where they describe
// an earlier agent of its name (the directory is updated in place, but
// agent/<name> is replaced: a grant on the old file would not reach the
// new). It only logs a failure: the agent runs without its files.
func (run *Runner) holdControl(a *kin.Agent, c *ctxAgent) {
	if run.served != nil {
		run.names.remember(a.Name, a.ID)
		return
	}
	if b, err := run.ctx.ReadFile(run.ctx.AgentFile(a.Name), 64); err == nil && strings.TrimSpace(string(b)) == a.ID.String() && fileExists(run.ctx.ControlDir(a.Name)) {
		return
	}
	if err := run.writeControl(a, c); err != nil {
		run.log.Warn("agent filesystem: control files", "agent", a.ID, "err", err)
	}
}

// ctlSource answers the mount from the store and the runner's memory of
// each agent's runtime: what the writer would have written, as of now.
type ctlSource struct {
	run *Runner

	// socks holds the owner of each socket being bound now, by its
	// node's name (listen): SocketOwner answers the mount's mknod with it.
	sockMu sync.Mutex
	socks  map[string]*syscall.Credential
}

// SocketOwner: the owner listen is binding the socket for, if it is.
func (s *ctlSource) SocketOwner(name string) (uid, gid uint32, ok bool) {
	s.sockMu.Lock()
	defer s.sockMu.Unlock()
	if c := s.socks[name]; c != nil {
		return c.Uid, c.Gid, true
	}
	return 0, 0, false
}

// listen opens agent a's socket. Served, the mount is told its owner
// first (SocketOwner), so that bind(2) makes the node with it and no chown
// goes through the mount (a request to this daemon in every spawn).
func (run *Runner) listen(a *kin.Agent) (*agentsock.Socket, error) {
	cred := run.agentCredential(a.ID)
	if s := run.ctlSrc; s != nil && cred != nil {
		name := filepath.Base(run.socks.Path(a.Name))
		s.sockMu.Lock()
		if s.socks == nil {
			s.socks = map[string]*syscall.Credential{}
		}
		s.socks[name] = cred
		s.sockMu.Unlock()
		defer func() {
			s.sockMu.Lock()
			if s.socks[name] == cred {
				delete(s.socks, name)
			}
			s.sockMu.Unlock()
		}()
	}
	return run.socks.Listen(a, cred)
}

// nameIndex is the latest agent of each name this daemon saw (started,
// served or wrote the files of): names are unique among live agents only,
// and an ended agent's files stay until its name is taken again. The
// writer (ctxsync.go) and the served files (ctlSource) keep one.
type nameIndex struct {
	mu sync.Mutex
	m  map[string]kin.AgentID
}

func newNameIndex() *nameIndex { return &nameIndex{m: map[string]kin.AgentID{}} }

// remember notes id as name's latest agent, unless a later one is known.
func (x *nameIndex) remember(name string, id kin.AgentID) {
	x.mu.Lock()
	if x.m[name] < id {
		x.m[name] = id
	}
	x.mu.Unlock()
}

// latest returns name's latest agent, false when none is known.
func (x *nameIndex) latest(name string) (kin.AgentID, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id, ok := x.m[name]
	return id, ok
}

// srcTimeout bounds one answer: a reader waits on it in the kernel (and
// a reader that is killed, only until the store's read sees its request
// interrupted). A host cut off from its store answers EIO after it.
const srcTimeout = 2 * time.Second

// Resolve: the live agent of that name; else the latest this host had of
// it (names are unique among live agents only, and an ended agent's files
// stay until its name is taken again). The latest agent of the name this
// daemon started, while it runs here, is the live one, so a lookup of a
// running agent's entries (its shim's grants, its own reads) reads no
// store: each spawn notes its agent before the process starts.
func (s *ctlSource) Resolve(ctx context.Context, name string) (kin.AgentID, error) {
	run := s.run
	if id, ok := run.names.latest(name); ok && run.runtimeOf(id) != nil {
		return id, nil
	}
	ctx, cancel := context.WithTimeout(ctx, srcTimeout)
	defer cancel()
	a, err := run.store.AgentLiveByName(ctx, name)
	switch {
	case err == nil && run.ownsAgent(a):
		run.names.remember(a.Name, a.ID)
		return a.ID, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	// The latest this host knew of, when it is this host's (the index
	// may have met another host's agent of that name).
	if id, ok := run.names.latest(name); ok {
		if a, err := run.store.AgentGetByID(ctx, id); err == nil && run.ownsAgent(a) {
			return id, nil
		}
	}
	all, err := run.store.AgentList(ctx, kin.AgentFilter{Name: name})
	if err != nil {
		return 0, err
	}
	var id kin.AgentID
	for _, a := range all {
		if run.ownsAgent(a) && a.ID > id {
			id = a.ID
		}
	}
	if id != 0 {
		run.names.remember(name, id)
	}
	return id, nil
}

// Group: the agent's gid (its control files' group), as its spawn set it
// (agentOwner): no store read. Resolve answered only this host's agents.
func (s *ctlSource) Group(ctx context.Context, id kin.AgentID) (int, error) {
	return s.run.agentOwner(id).GID, nil
}

func (s *ctlSource) Control(ctx context.Context, id kin.AgentID) (ctxfs.ControlValues, error) {
	run := s.run
	ctx, cancel := context.WithTimeout(ctx, srcTimeout)
	defer cancel()
	a, err := run.store.AgentGetByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !run.ownsAgent(a)) {
		return ctxfs.ControlValues{}, fmt.Errorf("agent %d: %w", id, fs.ErrNotExist)
	}
	if err != nil {
		return ctxfs.ControlValues{}, err
	}
	c := run.ctxAgentOf(ctx, a)
	run.ctxMu.Lock()
	rt := run.runtime(c, a.ID)
	run.ctxMu.Unlock()
	return ctxfs.ControlFor(a, rt)
}

// Names: this host's agents' names, each with its latest agent, from one
// query that reads no agent's row.
func (s *ctlSource) Names(ctx context.Context) ([]ctxfuse.Entry, error) {
	run := s.run
	ctx, cancel := context.WithTimeout(ctx, srcTimeout)
	defer cancel()
	names, err := run.store.AgentNamesOfHost(ctx, run.cfg.Host)
	if err != nil {
		return nil, err
	}
	es := make([]ctxfuse.Entry, len(names))
	for i, n := range names {
		es[i] = ctxfuse.Entry{Name: n.Name, ID: n.ID}
	}
	return es, nil
}
