package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/mcpserver"
	"github.com/kin-agents/kin/kin"
)

func (a *app) mcpCommand() *cobra.Command {
	var as string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve kin's tools to an AI agent over the Model Context Protocol (stdio)",
		Long: `Run a Model Context Protocol server on stdin and stdout, so that an MCP
client (Claude Code, Claude Desktop, an agent framework) can spawn, wait for,
read, message and stop agents through kin. Its tools act as the caller, like
every other kin command: run inside an agent (KIN_SOCKET in its environment,
as kin spawn sets it) they act as that agent, on itself and its descendants
only; outside, through the operator socket (--home, $KIN_HOME, ~/.kin or, as root, /var/lib/kin/home) or
KIN_ADDR and KIN_TOKEN, as the operator, or with --as for an agent the
operator registered (say a root standing for this Claude Code session):
then every tool is confined to that agent's subtree, and spawn_agent makes
its children, as if kin mcp ran inside it.

Tools:

  spawn_agent     start a child: name, role, command, handoff (its task),
                  refs, contract, policy, stage, template, set, life, env,
                  dir, restart, grace, and seed 000's wallet, scope,
                  self_modifying, constitution_hash, capability_hash;
                  parent (default: the calling agent) and responsible (for
                  a root) for the operator
  wait_agent      wait for an agent to end: its result status and result.md
  get_result      an agent's result as kin kept it, ended or not
  list_children   an agent's children (default: the caller's)
  stop_agent      stop an agent and its owned subtree
  send_message    send a message to an agent's session
  read_inbox      the messages sent to the caller (does not wait)
  authorize_tool  may the caller use a tool now? (a denial is an answer)
  report_usage    report tokens and cost against the budgets
  heartbeat       report the caller alive, with a cursor

A refusal by kin (spawn_depth_exceeded, permission_escalation,
budget_exhausted, ...) is a tool error whose text is "<code>: <message>", for
the model to read; only a broken protocol is a protocol error.

The daemon must be running ("kin serve"): kin mcp checks that it can reach it
before it serves, and exits 1 otherwise. It ends when its input ends.

Register it in an MCP client, e.g. in Claude Code's .mcp.json or Claude
Desktop's claude_desktop_config.json:

  {
    "mcpServers": {
      "kin": {
        "command": "kin",
        "args": ["mcp"],
        "env": {"KIN_HOME": "/home/me/.kin"}
      }
    }
  }

or "claude mcp add kin -- kin mcp". Inside an agent spawned by kin, leave
"env" out: the agent's own KIN_SOCKET makes the tools act as the agent.
integrations/ has ready snippets for Claude Code and Codex.

Remote clients: "kin serve --http ADDR" serves the same tools over
streamable HTTP at http://ADDR/mcp (stateless: each POST is one message).
The operator sends its token (Authorization: Bearer <operator.token>); an
agent signs each request with its own key, presenting its agent token ("kin
token") in Signature-Key, as AAuth does, and then acts as that agent. Over
HTTP kin reads no file for an agent: refs and template need "kin mcp" inside
the agent.`,
		Example: `  kin mcp
  kin mcp --home /srv/kin
  kin register --name claude-session --responsible "Dr. Schmidt"   # prints its id, say 12
  kin mcp --as 12`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			if as != "" {
				if svc, err = actingAs(cmd.Context(), svc, as); err != nil {
					return err
				}
			}
			if _, err := svc.Whoami(cmd.Context()); err != nil {
				return err
			}
			opts := mcpserver.Options{Version: version()}
			if a.env.Getenv("KIN_AGENT_ID") == "" {
				// The operator's agents start where kin mcp runs, like kin
				// spawn's; inside an agent, in the child's own session.
				if wd, err := os.Getwd(); err == nil {
					opts.Dir = wd
				}
			}
			s := mcpserver.New(svc, opts)
			t := &mcp.IOTransport{Reader: io.NopCloser(a.env.Stdin), Writer: nopWriteCloser{a.env.Stdout}}
			err = s.Run(cmd.Context(), t)
			if err == nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
				return nil
			}
			if cmd.Context().Err() != nil {
				return nil // interrupted: the client went away
			}
			return kin.Errorf(kin.ECodeInternal, "mcp: %v", err)
		}),
	}
	cmd.Flags().StringVar(&as, "as", "", "act for this agent (id or name), which the operator registered: its tools are confined to the agent's subtree and spawn_agent makes its children (operator only)")
	return cmd
}

// actingAs is svc acting for the agent ref names (an id, or the name of a
// live agent), as kin.HeaderActAs makes it: the daemon resolves ref once,
// and the session then names the agent by its id, so that it stays with
// that agent even if the name later passes to another.
func actingAs(ctx context.Context, svc kin.Service, ref string) (kin.Service, error) {
	c, ok := svc.(*client.Client)
	if !ok {
		return nil, kin.Errorf(kin.ECodeInvalid, "--as needs kin reached through its socket or KIN_ADDR")
	}
	me, err := c.ActingAs(ref).Whoami(ctx)
	if err != nil {
		return nil, kin.Errorf(kin.ErrorCodeOf(err), "--as %s: %s", ref, strings.TrimPrefix(kin.ErrorMessageOf(err), kin.HeaderActAs+": "))
	}
	return c.ActingAs(me.ID.String()), nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
