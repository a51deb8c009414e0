package cli

import (
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) contextCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Read what an agent's children handed back to it",
		Long: `Every agent kin spawns has a session in kin's agent filesystem (seed 001).
When a parent hands a child a task ("kin spawn --handoff"), its session
gets context/child/<child>/: the child's status, its handoff.md, and once
the child has ended, its result.md, refs.jsonl and artifact/, checked
against the output contract and copied in by kin. A child's own messages
never reach its parent: only what it handed back.

"kin context pack" puts that together for the parent's context.`,
		Example: `  kin context pack
  kin context pack 7 --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return cmd.Help() }),
	}
	cmd.AddCommand(a.contextPackCommand())
	return cmd
}

func (a *app) contextPackCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pack [ID]",
		Short: "Print what an agent's context should include about its children",
		Long: `Print agent ID's context pack (seed 001): for each child it handed a task,
by name, the child's status (running, completed, contract_violated, failed,
cancelled), the first line of its task, its result.md, its refs one line
each, and its needed artifacts (those refs.jsonl or the contract name, when
they are small text) inlined. Never a child's messages.jsonl.

The pack is Markdown, meant for the parent's model; with --json it comes
with the same as JSON ({"agent", "text", "children"}).

Without ID, the pack of the calling agent: run inside an agent, it is that
agent's own. The operator has no context of its own and must name an agent.`,
		Example: `  kin context pack              # inside an agent: its own
  kin context pack 7
  kin context pack 7 --json | jq '.children[].status'`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageErrorf("%s takes at most one agent ID (e.g. %s 7), not %d arguments", cmd.CommandPath(), cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := a.optionalAgentArg(cmd.Context(), args)
			if err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			if id == 0 {
				me, err := svc.Whoami(cmd.Context())
				if err != nil {
					return err
				}
				if me == nil {
					return kin.Errorf(kin.ECodeInvalid, "name an agent: the operator has no context (kin context pack ID)")
				}
				id = me.ID
			}
			p, err := svc.ContextPack(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(p)
			}
			text := p.Text
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			_, err = io.WriteString(a.env.Stdout, text)
			return err
		}),
	}
}
