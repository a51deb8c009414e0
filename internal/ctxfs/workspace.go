package ctxfs

import (
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// dirWorkspace is an agent's workspace (seed 003): its lasting files, made
// from a template or by the agent itself, beside its sessions.
const dirWorkspace = "workspace"

// WorkspaceDir is <root>/home/<uid>/agent/<name>/workspace.
func (l Layout) WorkspaceDir(uid int, name string) string {
	return filepath.Join(l.AgentHome(uid, name), dirWorkspace)
}

// MakeWorkspace makes the workspace of the agent name run by o, owned by
// o, without following a link on the way, and returns its path. Whoever
// writes into it must do so through an os.Root of that path: the agent
// owns it.
func (f *FS) MakeWorkspace(o Owner, name string) (string, error) {
	if err := o.validate(); err != nil {
		return "", err
	}
	if err := checkName("agent", name); err != nil {
		return "", err
	}
	home, err := walk(f.rootFD, []string{dirHome})
	if err != nil {
		return "", err
	}
	defer unix.Close(home)
	fd, err := f.mkdirsAt(home, []string{strconv.Itoa(o.UID), dirAgent, name}, o, ModeAgentHome)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	ws, err := f.mkdirsAt(fd, []string{dirWorkspace}, o, ModeWorkspace)
	if err != nil {
		return "", err
	}
	unix.Close(ws)
	return f.WorkspaceDir(o.UID, name), nil
}
