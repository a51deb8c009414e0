package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

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
		src := &ctlSource{run: run, names: map[string]kin.AgentID{}}
		m, err := ctxfuse.New(dir, src, run.log)
		if err == nil {
			run.served, run.ctlSrc = m, src
			run.log.Info("agent filesystem: control files served from the store (FUSE)", "dir", dir)
			return
		}
		why = err.Error()
	}
	run.log.Info("agent filesystem: control files written to disk", "dir", dir, "because", why)
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

// ctlSource answers the mount from the store and the runner's memory of
// each agent's runtime: what the writer would have written, as of now.
type ctlSource struct {
	run *Runner

	mu    sync.Mutex
	names map[string]kin.AgentID // the latest agent of each name this daemon saw
}

// srcTimeout bounds one answer: a reader waits on it in the kernel (and
// a reader that is killed, only until the store's read sees its request
// interrupted). A host cut off from its store answers EIO after it.
const srcTimeout = 2 * time.Second

// Resolve: the live agent of that name; else the latest this host had of
// it (names are unique among live agents only, and an ended agent's files
// stay until its name is taken again).
func (s *ctlSource) Resolve(ctx context.Context, name string) (kin.AgentID, error) {
	run := s.run
	ctx, cancel := context.WithTimeout(ctx, srcTimeout)
	defer cancel()
	a, err := run.store.AgentLiveByName(ctx, name)
	switch {
	case err == nil && run.ownsAgent(a):
		s.remember(a)
		return a.ID, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return 0, err
	}
	s.mu.Lock()
	id, ok := s.names[name]
	s.mu.Unlock()
	if ok {
		return id, nil
	}
	all, err := run.store.AgentList(ctx, kin.AgentFilter{Name: name})
	if err != nil {
		return 0, err
	}
	for _, a := range all {
		if run.ownsAgent(a) && a.ID > id {
			id = a.ID
		}
	}
	if id != 0 {
		s.remember(&kin.Agent{ID: id, Name: name})
	}
	return id, nil
}

// remember notes a as its name's latest agent, unless a later one is
// known (the writer calls it for every agent it applies).
func (s *ctlSource) remember(a *kin.Agent) {
	s.mu.Lock()
	if s.names[a.Name] < a.ID {
		s.names[a.Name] = a.ID
	}
	s.mu.Unlock()
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
	rt := c.rt
	run.ctxMu.Unlock()
	return ctxfs.ControlFor(a, rt)
}

func (s *ctlSource) Names(ctx context.Context) ([]ctxfuse.Entry, error) {
	run := s.run
	ctx, cancel := context.WithTimeout(ctx, srcTimeout)
	defer cancel()
	all, err := run.store.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		return nil, err
	}
	latest := map[string]kin.AgentID{}
	for _, a := range all {
		if run.ownsAgent(a) {
			latest[a.Name] = max(latest[a.Name], a.ID)
		}
	}
	es := make([]ctxfuse.Entry, 0, len(latest))
	for n, id := range latest {
		es = append(es, ctxfuse.Entry{Name: n, ID: id})
	}
	return es, nil
}
