package runner

import (
	"strings"

	"github.com/kin-agents/kin/internal/supervisor"
	"github.com/kin-agents/kin/internal/supervisor/cgroup"
	"github.com/kin-agents/kin/kin"
)

// An agent's kernel limits come from its flattened policy's budget and the
// profile's default pids limit (the least of them), and bind it the best
// way this host offers:
//
//   - pids: pids.max on its group, its whole subtree, where kin's tree has
//     the pids controller; else RLIMIT_NPROC where the agent's uid is its
//     own (a root daemon's per-agent uids) or counted in a user namespace
//     of its own (PID namespaces containment): its own tasks, not its
//     children's, each of which has its own limit no larger;
//   - memory: memory.max on its group where kin's tree has the memory
//     controller; else RLIMIT_AS on each process (with memory_bytes);
//   - cpu: cpu.max on its group where kin's tree has the cpu controller;
//     else not enforced;
//   - cpu_seconds, memory_bytes, open_files: rlimits of each process.
//
// Nothing is claimed that is not enforced: each limit says its scope and
// mechanism (kin show, the dashboard, kin status).

// kernelLimits is what binds one agent: the limits its group gets and
// what its shim sets.
type kernelLimits struct {
	group     cgroup.Limits
	nproc     int64 // RLIMIT_NPROC
	addrSpace int64 // RLIMIT_AS
}

// limitsFor is what binds an agent of flattened policy flat: what
// LimitsOf says, each limit given to the mechanism it names, so that what
// kin shows and what it sets are one decision. RLIMIT_AS gets the least
// of memory (without its controller) and memory_bytes.
func (run *Runner) limitsFor(flat kin.Policy) kernelLimits {
	var k kernelLimits
	for _, l := range run.LimitsOf(flat) {
		v := int64(l.Value)
		switch l.By {
		case "pids.max":
			k.group.Pids = v
		case "memory.max":
			k.group.MemoryBytes = v
		case "cpu.max":
			k.group.CPUCores = l.Value
		case "RLIMIT_NPROC":
			k.nproc = v
		case "RLIMIT_AS":
			if k.addrSpace == 0 || v < k.addrSpace {
				k.addrSpace = v
			}
		}
	}
	return k
}

// pidsOf is the pids limit of an agent with budget b: the least of its
// budget's and the profile's default.
func (run *Runner) pidsOf(b *kin.Budget) int64 {
	pids := int64(run.reg.Profile().Limits.Pids)
	if b.Pids != nil {
		pids = min(pids, *b.Pids)
	}
	return pids
}

func budgetOf(flat kin.Policy) *kin.Budget {
	if flat.Budget == nil {
		return &kin.Budget{}
	}
	return flat.Budget
}

// ownTaskCount reports whether RLIMIT_NPROC counts an agent's tasks alone:
// it counts the tasks of a uid within a user namespace, so the uid must be
// the agent's own (not a policy's uid, not the daemon's), or the
// namespace.
func (run *Runner) ownTaskCount(flat kin.Policy) bool {
	if run.sup.UserNamespaces() {
		return true
	}
	return run.uids != nil && flat.UID == nil
}

// LimitsOf lists the kernel limits binding an agent whose flattened
// policy is flat, each with its scope and mechanism on this host.
func (run *Runner) LimitsOf(flat kin.Policy) []kin.ResourceLimit {
	b := budgetOf(flat)
	out := []kin.ResourceLimit{run.pidsLimit(flat, float64(run.pidsOf(b)))}
	if b.Memory != nil {
		out = append(out, run.memoryLimit(float64(*b.Memory)))
	}
	if b.CPU != nil {
		out = append(out, run.cpuLimit(*b.CPU))
	}
	for _, l := range []struct {
		name, by string
		v        *int64
	}{{"cpu_seconds", "RLIMIT_CPU", b.CPUSeconds}, {"memory_bytes", "RLIMIT_AS", b.MemoryBytes}, {"open_files", "RLIMIT_NOFILE", b.OpenFiles}} {
		if l.v != nil {
			out = append(out, kin.ResourceLimit{Name: l.name, Value: float64(*l.v), Scope: kin.LimitProcess, By: l.by})
		}
	}
	return out
}

// HostLimits says how this host enforces each subtree limit of a budget
// (kin status, the start-up line), for an agent with no uid of its policy.
func (run *Runner) HostLimits() []kin.ResourceLimit {
	return []kin.ResourceLimit{run.pidsLimit(kin.Policy{}, 0), run.memoryLimit(0), run.cpuLimit(0)}
}

func (run *Runner) pidsLimit(flat kin.Policy, v float64) kin.ResourceLimit {
	l := kin.ResourceLimit{Name: "pids", Value: v}
	switch {
	case run.sup.HasController("pids"):
		l.Scope, l.By = kin.LimitSubtree, "pids.max"
	case run.ownTaskCount(flat):
		l.Scope, l.By = kin.LimitAgent, "RLIMIT_NPROC"
		own := "its own uid"
		if run.sup.UserNamespaces() {
			own = "its own user namespace"
		}
		l.Note = "counted on " + own + "; each child agent has its own limit, no larger; " + run.controllerNote("pids")
	default:
		l.Scope = kin.LimitNone
		switch {
		case flat.UID != nil:
			l.Note = "it runs as a uid its policy names, which other processes may share, so RLIMIT_NPROC would not count its tasks alone; " + run.controllerNote("pids")
		default:
			l.Note = "agents share the daemon's uid and have no user namespace of their own (see kin status: they are refused here), so RLIMIT_NPROC would count the daemon's user's processes; " + run.controllerNote("pids")
		}
	}
	return l
}

func (run *Runner) memoryLimit(v float64) kin.ResourceLimit {
	l := kin.ResourceLimit{Name: "memory", Value: v}
	if run.sup.HasController("memory") {
		l.Scope, l.By = kin.LimitSubtree, "memory.max"
		return l
	}
	l.Scope, l.By = kin.LimitProcess, "RLIMIT_AS"
	l.Note = "each process's address space, not the subtree's memory; " + run.controllerNote("memory")
	return l
}

func (run *Runner) cpuLimit(v float64) kin.ResourceLimit {
	l := kin.ResourceLimit{Name: "cpu", Value: v}
	if run.sup.HasController("cpu") {
		l.Scope, l.By = kin.LimitSubtree, "cpu.max"
		return l
	}
	l.Scope, l.Note = kin.LimitNone, run.controllerNote("cpu")
	return l
}

// controllerNote says why controller c is missing and where to grant it.
func (run *Runner) controllerNote(c string) string {
	if run.sup.Containment() != supervisor.ContainmentCgroup2 {
		return "no cgroup containment (" + run.sup.Containment() + ")"
	}
	_, parent := run.sup.MissingControllers()
	return "the " + c + " controller is not granted to kin's cgroup (enable it in " + parent + "/cgroup.subtree_control, or with systemd: Delegate=yes)"
}

// limitsGuarantee is the missing-guarantees line for the subtree limits
// this host cannot set, "" when it sets them all.
func (run *Runner) limitsGuarantee() string {
	missing, parent := run.sup.MissingControllers()
	if len(missing) == 0 {
		return ""
	}
	where := "no cgroup containment (" + run.sup.Containment() + ")"
	if parent != "" {
		where = "the cgroup v2 hierarchy grants kin's cgroup no " + strings.Join(missing, ", ") + " controller (enable it in " + parent + "/cgroup.subtree_control)"
	}
	var how []string
	for _, l := range run.HostLimits() {
		if l.Scope == kin.LimitSubtree {
			continue
		}
		switch l.Scope {
		case kin.LimitNone:
			how = append(how, "budget."+l.Name+" is not enforced")
		default:
			how = append(how, "budget."+l.Name+" binds "+scopeWords(l.Scope)+" ("+l.By+")")
		}
	}
	return "subtree limits: " + where + ": " + strings.Join(how, "; ") + ", not the agent's whole subtree"
}

func scopeWords(scope string) string {
	switch scope {
	case kin.LimitAgent:
		return "each agent's own processes"
	case kin.LimitProcess:
		return "each process"
	}
	return scope
}
