package runner

import (
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/leanshim"
	"github.com/kin-agents/kin/kin"
)

// prepareDirs makes the directories agents use. The home is 0711: agents,
// which run as their own uids, may pass through it to their sockets and
// sessions under ctx, but not list it; what is private in it (the operator
// token and socket, the database, the logs) is 0600 or 0700 itself.
func (run *Runner) prepareDirs() error {
	if err := os.Chmod(run.cfg.Home, 0o711); err != nil {
		return err
	}
	// Parents first: the home's and the ctx root's subdirectories, and
	// every agent's directories below ctx/home and ctx/agent, are spread
	// over the file system's block groups (ctxfs.SpreadDir).
	run.spread(run.cfg.Home)
	for _, d := range []struct {
		dir    string
		mode   os.FileMode
		spread bool
	}{
		{filepath.Join(run.cfg.Home, "logs"), 0o700, false},
		{run.ctxDir, 0o711, true},
		{filepath.Join(run.ctxDir, "agent"), 0o711, true},
		{filepath.Join(run.ctxDir, "home"), 0o711, true},
		{filepath.Join(run.ctxDir, "bin"), 0o755, false},
	} {
		if err := os.MkdirAll(d.dir, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.dir, d.mode); err != nil {
			return err
		}
		if d.spread {
			run.spread(d.dir)
		}
	}
	published := run.publishKin()
	run.agentPath = agentPATH(published)
	run.agentPathList = filepath.SplitList(run.agentPath)
	if run.cfg.ShimPath == "" {
		lean, err := leanshim.Install(filepath.Join(run.ctxDir, "bin"))
		if err != nil {
			run.log.Warn("agents start through the kin binary itself (about 10 ms of CPU each, not 1.8 ms): no lean sandbox shim", "err", err)
		}
		run.leanShim = lean
	}
	if published == "" && run.leanShim == "" {
		run.publishShim()
	}
	return nil
}

// publishKin puts the running kin binary where every agent may execute it,
// <ctx>/bin/kin, so that `kin` inside an agent is the kin that supervises
// it (also under `go run`, whose binary sits in a 0700 temporary
// directory). It returns the directory, or "" when the daemon is not a kin
// binary (a test).
func (run *Runner) publishKin() string {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != "kin" {
		return ""
	}
	bin := filepath.Join(run.ctxDir, "bin")
	dst := filepath.Join(bin, "kin")
	tmp := dst + ".new"
	os.Remove(tmp)
	if err := os.Link(exe, tmp); err != nil {
		if err := copyExecutable(exe, tmp); err != nil {
			run.log.Warn("publish kin for agents", "err", err)
			return ""
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil || os.Rename(tmp, dst) != nil {
		run.log.Warn("publish kin for agents", "path", dst)
		return ""
	}
	return bin
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(0o755); err != nil { // whatever the umask is now
		out.Close()
		return err
	}
	return out.Close()
}

// agentCredential is the uid and gid agent id runs as, or nil to run as
// the daemon's user.
func (run *Runner) agentCredential(id kin.AgentID) *syscall.Credential {
	if run.uids == nil {
		return nil
	}
	uid, err := run.uids.UID(uint64(id))
	if err != nil {
		// Unreachable: register refuses ids outside the range and start
		// checks again. Should it happen, the range's first uid, which no
		// agent and no other daemon has, beats the daemon's own (root) or
		// a wrapped uid of someone else.
		uid = run.uids.Start
	}
	c := &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	if flat, ok := run.auth.Flat(id); ok {
		if flat.UID != nil {
			c.Uid = *flat.UID
		}
		if flat.GID != nil {
			c.Gid = *flat.GID
		}
		if flat.Groups != nil {
			c.Groups = flat.Groups
		}
	}
	return c
}

// agentKeyPath is where agent id finds its private key: its ctx session's
// agent.key, "" when it has none here.
func (run *Runner) agentKeyPath(id kin.AgentID) string {
	run.ctxMu.Lock()
	defer run.ctxMu.Unlock()
	if cx := run.ctxAgents[id]; cx != nil && cx.session.Agent != "" {
		return filepath.Join(run.ctx.Dir(cx.session), ctxfs.FileAgentKey)
	}
	return ""
}

// spread is ctxfs.SpreadDir, logged when it fails: the daemon works the same
// without it, only slower to create agents' files on a busy file system.
func (run *Runner) spread(dir string) {
	if err := ctxfs.SpreadDir(dir); err != nil {
		run.log.Warn("spread agents' directories over the file system (chattr +T)", "dir", dir, "err", err)
	}
}
