package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

// jsonFlag is a flag holding one JSON value, checked when it is set.
type jsonFlag struct{ v *json.RawMessage }

func (f jsonFlag) String() string {
	if f.v == nil {
		return ""
	}
	return string(*f.v)
}

func (f jsonFlag) Set(s string) error {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	*f.v = json.RawMessage(strings.TrimSpace(s))
	return nil
}

func (f jsonFlag) Type() string { return "JSON" }

func (a *app) authorizeCommand() *cobra.Command {
	var req kin.AuthorizeRequest
	cmd := &cobra.Command{
		Use:   "authorize --tool NAME [--input JSON] [--agent ID]",
		Short: "Ask kin whether an agent may use a tool now",
		Long: `Ask kin whether an agent may use a tool, and exit with the answer: the
decision point for what the kernel cannot see (a shell command, a web fetch,
an MCP call), for a runtime to ask before it acts. kin answers from the
agent's effective policy: the global deny list, its stage's preset, its own
policy and every ancestor's (seed 003's tool presets).

Tools are named in kin's vocabulary: exec, read, write, edit, web_fetch,
web_search, spawn, todo, and MCP tools as mcp__<server>__<tool>. --input is
the tool's input as JSON, passed on to kin as it is. Run by an agent (with
KIN_SOCKET set) it asks for that agent; the operator names one with --agent.
A denial is recorded as a tool.denied event.

Prints "allowed: <reason>" on stdout, or "denied: <reason>" on stderr; with
--json the decision (allowed, reason, and the rule, source layer, agent and
preset that decided) on stdout either way. "kin explain" shows every layer's
say. For Claude Code, "kin hook claude-code" asks the same question for
every tool call.

Exit status:
  0  allowed
  1  denied, or the question could not be answered (the error is on stderr,
     prefixed "kin:" and ending in its code)
  2  the command line is wrong`,
		Example: `  kin authorize --tool exec --input '{"command":"make test"}' && make test
  kin authorize --tool web_fetch --agent 7 --json
  kin authorize --tool mcp__github__create_issue || echo "not allowed"`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if req.Tool == "" {
				return usageErrorf("--tool needs a tool name, e.g. --tool exec")
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			d, err := svc.Authorize(cmd.Context(), req)
			if err != nil {
				return err
			}
			switch {
			case a.jsonOut:
				err = a.printJSON(d)
			case d.Allowed:
				_, err = fmt.Fprintf(a.env.Stdout, "allowed: %s\n", d.Reason)
			default:
				_, err = fmt.Fprintf(a.env.Stderr, "denied: %s\n", d.Reason)
			}
			if err != nil {
				return err
			}
			if !d.Allowed {
				return &exitStatus{code: ExitError}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Tool, "tool", "", "the `tool` to ask about, in kin's vocabulary (exec, read, write, edit, web_fetch, mcp__server__tool, ...)")
	f.Var(jsonFlag{v: &req.Input}, "input", "the tool's input, a JSON value (e.g. '{\"command\":\"ls\"}')")
	f.Var(a.idFlag(&req.Agent, "agent", false), "agent", "the agent `ID` to ask for (the operator's way; inside an agent, the default is the agent itself)")
	cmd.MarkFlagRequired("tool")
	return cmd
}
