package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
)

// What every agent is kept from, in every containment mode (issue 18):
// kin's own state, acting as the operator, and the daemon's process. The
// pieces:
//
//   - the sandbox's default view hides kin's home and agent filesystem
//     from every agent but for its own home, socket and kin's binary, and
//     keeps the cgroup2 mount read-only (sandboxArgv);
//   - Landlock's signal scoping keeps an agent from signalling anything
//     outside its own domain, and Landlock keeps it from ptracing (so from
//     reading the memory of) the daemon;
//   - the operator socket refuses any peer inside kin's containment
//     (operatorConnContext), whether or not it can tell which agent;
//   - agent processes are held by cgroups, or by PID namespaces, which no
//     process leaves (setsid and env -i included).
//
// agentView fills what the sandbox's default view hides and keeps read
// only. Paths are canonical: Landlock rules name inodes, and the view is
// computed by walking real directories.
func (run *Runner) agentView() {
	canon := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	home, ctxDir := canon(run.cfg.Home), canon(run.ctxDir)
	run.agentDir = filepath.Join(ctxDir, "agent") // kin's directory: never a link
	run.hiddenFromAgents = []string{home}
	if ctxDir != home && !strings.HasPrefix(ctxDir, home+"/") {
		run.hiddenFromAgents = append(run.hiddenFromAgents, ctxDir)
	}
	if m, err := cgroup.FindMount(); err == nil {
		run.readOnlyForAgents = []string{canon(m.Dir)}
	}
	// A root daemon keeps the default view open for its agents' shims
	// (sandbox.View): each agent runs as a user of its own, which the
	// view treats as it treats others.
	if run.uids != nil && os.Geteuid() == 0 && sandbox.ABI() > 0 {
		run.view = sandbox.NewView(run.hiddenFromAgents, run.readOnlyForAgents)
		if err := run.view.Warm(); err != nil {
			run.log.Warn("the default view: each shim walks it", "err", err)
			run.view.Close()
			run.view = nil
		}
	}
}

// checkAgentsReachCtx refuses a home no agent could use: where agents run
// as their own uids (a root daemon), each needs to pass through every
// directory above its session in the agent filesystem (its working
// directory, its output, kin's binary it starts through and calls). A home
// under a directory other users cannot traverse (root's ~/.kin, /root being
// 0700) would make every spawn fail with "permission denied"; better said
// once, at start, with the fix.
func (run *Runner) checkAgentsReachCtx() error {
	if run.uids == nil {
		return nil
	}
	ctxDir, err := filepath.Abs(run.ctxDir)
	if err != nil {
		return err
	}
	for dir := ctxDir; ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("agent filesystem %s: %w", ctxDir, err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("agents run as their own uids and must pass through every directory above their sessions in the agent filesystem %s, "+
				"but %s (mode %04o) lets no other user through: give kin serve a --ctx outside it (e.g. --ctx /var/lib/kin/ctx) or a --home elsewhere, or chmod o+x %s",
				ctxDir, dir, st.Mode().Perm(), dir)
		}
		if dir == "/" {
			return nil
		}
	}
}

// missingGuarantees lists, in words for an operator, what this kernel and
// this containment cannot give: kin serve prints them at start, kin status
// shows them, /metrics counts them. It never claims one of them.
func (run *Runner) missingGuarantees() []string {
	var out []string
	abi := sandbox.ABI()
	switch {
	case abi == 0:
		out = append(out, "no Landlock on this kernel: kin's home (operator token, keys, database) is not hidden from agents by the sandbox"+run.uidNote()+
			"; agents are not kept from signalling or ptracing other processes of their uid, the daemon included")
	case abi < 6:
		out = append(out, "Landlock ABI "+strconv.Itoa(abi)+" has no signal scoping (ABI 6): an agent may signal processes of its uid outside its tree, the daemon included"+run.uidNote())
	}
	if abi < 9 {
		out = append(out, "Landlock ABI "+strconv.Itoa(abi)+" does not restrict connecting to Unix sockets (ABI 9): kin's own sockets refuse agents by their peer's process instead")
	}
	if run.cfg.HTTPAddr != "" && run.cfg.HTTPAddr != "off" {
		out = append(out, "agents may connect to the HTTP address "+run.HTTPAddr()+" (Landlock's TCP rules are port allow-lists): without the operator token, which the sandbox hides, it answers them only what it answers anyone")
	}
	if l := run.limitsGuarantee(); l != "" {
		out = append(out, l)
	}
	switch run.sup.Containment() {
	case supervisor.ContainmentProcessGroups:
		out = append(out, "process-groups containment: a process that calls setsid and clears its environment escapes its agent's cascade, and the operator socket cannot tell it is an agent's ("+run.sup.ContainmentReason()+"); run kin in a delegated cgroup (systemd-run --user --scope -p Delegate=yes kin serve) or allow unprivileged user namespaces")
	case supervisor.ContainmentPIDNamespaces:
		out = append(out, "pid-namespaces containment: agents share the daemon's uid (no per-agent uid without root), and /proc inside an agent shows the host's pids")
	}
	return out
}

func (run *Runner) uidNote() string {
	if run.cfg.AgentUIDs {
		return " (agents run as their own uids, so file modes still keep them out)"
	}
	return ""
}

// describeContainment is what confines every agent besides its
// containment, in one phrase for logs and kin status.
func (run *Runner) describeContainment() string {
	if abi := sandbox.ABI(); abi > 0 {
		return fmt.Sprintf("Landlock ABI %d", abi)
	}
	return "no Landlock on this kernel"
}
