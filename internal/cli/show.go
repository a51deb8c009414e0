package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

// agentWithPolicy is kin show --json: the agent, with its policy, or why
// the policy could not be read.
type agentWithPolicy struct {
	*kin.Agent
	Policy      *kin.AgentPolicy `json:"policy,omitempty"`
	PolicyError *kin.Error       `json:"policy_error,omitempty"`
	// Resources is a running agent's live usage, where the host accounts
	// it (cgroups).
	Resources *kin.AgentResources `json:"resources,omitempty"`
}

func (a *app) showCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one agent, with its policy and spend",
		Long: `Show one agent: its lineage (parent, generation), its responsible party,
its status (active, suspended, revoked, terminated), its runtime state and
the rest of what it was registered with; then its stage, a summary of its
effective policy (the tools it may and may not use and where each rule
comes from, the paths it sees, whether it may spawn, its deadline) and its
subtree's spend against its budget.

With --json: the agent object with a "policy" key holding its requested
and effective policy and its spend (see "kin explain" for one decision
with every layer's say). When the policy cannot be read, the agent is still
shown: the text says why on a Policy line, and --json has "policy_error"
({"code", "message"}) instead of "policy".`,
		Example: `  kin show 7
  kin show '#7' --json
  kin show 7 --json | jq .policy.effective.flat`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			ag, err := svc.Agent(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := agentWithPolicy{Agent: ag}
			out.Policy, err = svc.Policy(cmd.Context(), id)
			if err != nil {
				out.PolicyError = &kin.Error{Code: kin.ErrorCodeOf(err), Message: kin.ErrorMessageOf(err)}
				if out.PolicyError.Code == kin.ECodeInternal {
					out.PolicyError.Message = err.Error()
				}
			}
			if ag.PID > 0 {
				out.Resources, _ = svc.Resources(cmd.Context(), id) // not accounted here, or it just ended: limits only
			}
			if a.jsonOut {
				return a.printJSON(out)
			}
			return writeAgentRows(a.env.Stdout, ag, func(row func(k, v string)) {
				if out.PolicyError != nil {
					row("Policy", fmt.Sprintf("unavailable: %s (%s)", oneLine(out.PolicyError.Message), out.PolicyError.Code))
					return
				}
				p := out.Policy
				if ag.Stage == "" && p.Stage != "" {
					from := " (its parent's)"
					if ag.RequestedBy != 0 {
						from = " (inherited)"
					}
					row("Stage", oneLine(p.Stage)+from)
				}
				summary := policySummary(p)
				if ag.RequestedBy != 0 && p.Requested == nil {
					summary = strings.Replace(summary, "it keeps its parent's.", fmt.Sprintf("it keeps what both its parent and agent %d (which asked for it) have.", ag.RequestedBy), 1)
				}
				row("Policy", summary)
				for i, l := range p.Effective.Limits {
					key := ""
					if i == 0 {
						key = "Limits"
					}
					row(key, limitString(l, out.Resources))
				}
				if s := spendString(&p.Spend); s != "" {
					row("Spend", s)
				} else {
					row("Spend", "nothing spent, no budget")
				}
			})
		}),
	}
}

// limitString says one kernel limit: its value, the live usage where
// there is one, what it binds and how, and why where it is not the
// subtree: "pids 50 tasks, 3 in use, for its whole subtree (pids.max)".
func limitString(l kin.ResourceLimit, r *kin.AgentResources) string {
	s := l.Name + " "
	switch l.Name {
	case "pids":
		s += fmt.Sprintf("%.0f tasks", l.Value)
		if r != nil && r.Pids != nil {
			s += fmt.Sprintf(", %d in use", *r.Pids)
		}
	case "memory", "memory_bytes":
		s += formatBytes(int64(l.Value))
		if r != nil && r.MemoryBytes != nil && l.Name == "memory" {
			s += ", " + formatBytes(*r.MemoryBytes) + " in use"
		}
	case "cpu":
		s += strconv.FormatFloat(l.Value, 'f', -1, 64) + " cores"
	case "cpu_seconds":
		s += fmt.Sprintf("%.0f CPU seconds", l.Value)
	case "open_files":
		s += fmt.Sprintf("%.0f open files", l.Value)
	default:
		s += strconv.FormatFloat(l.Value, 'f', -1, 64)
	}
	switch l.Scope {
	case kin.LimitSubtree:
		s += ", for its whole subtree (" + l.By + ")"
	case kin.LimitAgent:
		s += ", for its own processes (" + l.By + ")"
	case kin.LimitProcess:
		s += ", for each process (" + l.By + ")"
	default:
		s += ", not enforced"
	}
	if l.Note != "" {
		s += ": " + l.Note
	}
	return s
}

// formatBytes is n in the largest binary unit that keeps it at 1 or
// more: "512 B", "1.5 KiB", "256 MiB".
func formatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, exp := float64(n)/1024, 0
	for v >= 1024 && exp < 4 {
		v /= 1024
		exp++
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + "KMGTP"[exp:exp+1] + "iB"
}

// policySummary says in one paragraph what an agent holds: the tool rules
// of each layer with where they come from, the paths it sees, spawning,
// the other limits and the deadline.
func policySummary(p *kin.AgentPolicy) string {
	var parts []string
	var tools []string
	for _, l := range p.Effective.Layers {
		t := l.Policy.Tools
		if t == nil {
			continue
		}
		from := layerString(l, p.Agent)
		switch {
		case t.Allow != nil && len(t.Allow) == 0:
			tools = append(tools, "none at all ("+from+")")
		case t.Allow != nil:
			tools = append(tools, "only "+patternList(t.Allow)+" ("+from+")")
		}
		if len(t.Deny) > 0 {
			tools = append(tools, "not "+patternList(t.Deny)+" ("+from+")")
		}
	}
	if len(tools) == 0 {
		parts = append(parts, "Tools: any.")
	} else {
		parts = append(parts, "Tools: "+strings.Join(tools, "; ")+".")
	}
	flat := p.Effective.Flat
	if flat.Mounts == nil {
		parts = append(parts, "Paths: not limited.")
	} else {
		var ms []string
		for _, path := range slices.Sorted(maps.Keys(flat.Mounts)) {
			ms = append(ms, oneLine(path)+" "+string(flat.Mounts[path]))
		}
		ms = append(ms, "every other path hidden")
		parts = append(parts, "Paths: "+strings.Join(ms, ", ")+".")
	}
	if sp := flat.Spawn; sp != nil {
		switch {
		case sp.Allow != nil && !*sp.Allow:
			parts = append(parts, "Spawning: not allowed.")
		case sp.Roles != nil:
			parts = append(parts, "Spawning: roles "+patternList(sp.Roles)+" only.")
		}
	}
	if flat.Detach != nil && *flat.Detach {
		parts = append(parts, "May spawn detached children.")
	}
	if len(flat.Env) > 0 {
		parts = append(parts, "Passed-down environment: "+patternList(flat.Env)+".")
	}
	if len(flat.Groups) > 0 {
		gs := make([]string, len(flat.Groups))
		for i, g := range flat.Groups {
			gs[i] = fmt.Sprint(g)
		}
		parts = append(parts, "Groups: "+strings.Join(gs, " ")+".")
	}
	if flat.UID != nil || flat.GID != nil {
		s := "Runs as"
		if flat.UID != nil {
			s += fmt.Sprintf(" uid %d", *flat.UID)
		}
		if flat.GID != nil {
			s += fmt.Sprintf(" gid %d", *flat.GID)
		}
		parts = append(parts, s+".")
	}
	if !p.Effective.DeadlineAt.IsZero() {
		parts = append(parts, "Deadline: "+formatTime(p.Effective.DeadlineAt)+".")
	}
	if p.Requested == nil {
		parts = append(parts, "It has no policy of its own: it keeps its parent's.")
	}
	return strings.Join(parts, " ")
}

// layerString names a layer of agent self's policy: "global", "its own
// policy", "preset dev of agent 3", "agent 3's policy".
func layerString(l kin.PolicyLayer, self kin.AgentID) string {
	switch l.Source {
	case kin.SourceGlobal:
		return "global"
	case kin.SourcePreset:
		s := "preset " + oneLine(l.Name)
		if l.Agent == self {
			return s + ", its stage"
		}
		return s + " of agent " + l.Agent.String()
	case kin.SourcePolicy:
		if l.Agent == self {
			return "its own policy"
		}
		return "agent " + l.Agent.String() + "'s policy"
	}
	return oneLine(string(l.Source))
}

func patternList(ps []string) string {
	if len(ps) == 0 {
		return "none"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = oneLine(p)
	}
	return strings.Join(out, " ")
}
