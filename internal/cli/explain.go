package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) explainCommand() *cobra.Command {
	var tool, path string
	cmd := &cobra.Command{
		Use:   "explain ID (--tool NAME | --path PATH)",
		Short: "Explain why an agent may or may not use a tool or reach a path",
		Long: `Explain kin's decision for agent ID and one tool (--tool) or one path
(--path): what it decides, and what every layer of the agent's effective
policy says, from the global deny list down through each ancestor's stage
preset and policy to the agent's own, naming the rule and where it comes
from.

Prints the verdict, then one line per layer:

  denied: tool exec for agent 7: exec is denied (rule "deny exec", policy of agent 3)
    1. source=global agent=- preset=- allowed rule=- reason="..."
    2. source=policy agent=3 preset=- denied rule="deny exec" reason="..."

For a path the verdict gives its effective mode (rw, ro or hidden). With
--json: the explanation (the decision, and each layer's as "steps").

Exit status: 0 when kin explained (whatever it decided; "kin authorize"
exits with the decision), 1 when it could not (no such agent, not one of
yours), 2 when the command line is wrong (neither or both of --tool and
--path).`,
		Example: `  kin explain 7 --tool exec
  kin explain 7 --path /work/src
  kin explain 7 --tool web_fetch --json | jq '.steps[] | select(.allowed == false)'`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			f := cmd.Flags()
			switch {
			case f.Changed("tool") && f.Changed("path"):
				return usageErrorf("give --tool or --path, not both: one explanation answers one question")
			case !f.Changed("tool") && !f.Changed("path"):
				return usageErrorf("say what to explain: --tool NAME or --path PATH")
			case f.Changed("tool") && tool == "":
				return usageErrorf("--tool needs a tool name, e.g. --tool exec")
			case f.Changed("path") && path == "":
				return usageErrorf("--path needs a path, e.g. --path /work")
			}
			e, err := svc.Explain(cmd.Context(), kin.ExplainRequest{Agent: id, Tool: tool, Path: path})
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(e)
			}
			return writeExplanation(a.env.Stdout, e)
		}),
	}
	cmd.Flags().StringVar(&tool, "tool", "", "the `tool` to explain, in kin's vocabulary (exec, read, web_fetch, ...)")
	cmd.Flags().StringVar(&path, "path", "", "the absolute `path` to explain")
	return cmd
}

// writeExplanation prints the verdict line, then one line per layer.
func writeExplanation(w io.Writer, e *kin.Explanation) error {
	var b strings.Builder
	subject := fmt.Sprintf("tool %s for agent %d", e.Tool, e.Agent)
	if e.Path != "" {
		subject = fmt.Sprintf("path %s for agent %d", e.Path, e.Agent)
		if e.Mode != "" {
			subject += ", mode " + string(e.Mode)
		}
	}
	d := e.Decision
	fmt.Fprintf(&b, "%s: %s: %s", verdict(d.Allowed), oneLine(subject), oneLine(d.Reason))
	var where []string
	if d.Rule != "" {
		where = append(where, "rule "+quoteRule(d.Rule))
	}
	if s := sourceString(d); s != "" {
		where = append(where, s)
	}
	if len(where) > 0 {
		b.WriteString(" (" + strings.Join(where, ", ") + ")")
	}
	b.WriteString("\n")
	for i, s := range e.Steps {
		agent, preset := "-", "-"
		if s.Agent != 0 {
			agent = s.Agent.String()
		}
		if s.Preset != "" {
			preset = kvString(s.Preset)
		}
		rule := "-"
		if s.Rule != "" {
			rule = kvString(s.Rule)
		}
		fmt.Fprintf(&b, "  %d. source=%s agent=%s preset=%s %s rule=%s reason=%s\n",
			i+1, kvString(orDash(string(s.Source))), agent, preset, verdict(s.Allowed), rule, kvString(s.Reason))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func verdict(allowed bool) string {
	if allowed {
		return "allowed"
	}
	return "denied"
}

// sourceString says which layer a decision's rule comes from: "policy of
// agent 3", "preset dev of agent 3", "global deny list".
func sourceString(d kin.Decision) string {
	var s string
	switch d.Source {
	case "":
		return ""
	case kin.SourceGlobal:
		return "global deny list"
	case kin.SourcePreset:
		s = "preset"
		if d.Preset != "" {
			s += " " + oneLine(d.Preset)
		}
	default:
		s = oneLine(string(d.Source))
	}
	if d.Agent != 0 {
		s += " of agent " + d.Agent.String()
	}
	return s
}

func quoteRule(r string) string { return fmt.Sprintf("%q", r) }

// oneLine keeps text that comes from the daemon on one line: control
// characters are shown escaped.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }
