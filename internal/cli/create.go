package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) createCommand() *cobra.Command {
	var req kin.RegisterRequest
	var perm permFlags
	cmd := &cobra.Command{
		Use:   "create NAME --from-template DIR [--set K=V]... [flags]",
		Short: "Create an agent with a workspace from a template, and no process",
		Long: `Register agent NAME, as "kin register" does, and provision its workspace
from the template DIR (seed 003 §3); no process is started ("kin spawn
--template" does both).

The template is a directory: its files and directories become the agent's
workspace, owned by the agent, with placeholders filled in: {AGENT_NAME},
{PARENT} (the parent's name), {PARENT_A}, {RESPONSIBLE}, {ROLE}, and each
--set K=V ({K}; K is an upper-case letter, then upper-case letters, digits
and _). A template that uses a placeholder with no value is refused, naming
the file. Symbolic links, devices and files that are not UTF-8 text are
refused too.

A config fragment at DIR's top (.kin.json, or .kin.yaml) is not copied: it
may give the agent a role, a stage and a policy. The role and stage apply
where --role and --stage are not given; the policy is merged with --policy
FILE's, and --policy wins field by field. The result must be at most what
the parent holds, else permission_escalation lists every item.

The template and the policy file are read and checked here, with your own
rights, before anything is sent. Without --parent the agent is a root and
needs --responsible.

Prints the agent (with --json, the agent).

Exit status: 0 when the agent was created, 1 when it was refused or a file
is bad (the error says which), 2 when the command line is wrong.`,
		Example: `  kin create writer-2 --from-template ./templates/writer --parent 1 --set TOPIC=lineage
  kin create auditor --from-template ./templates/auditor --responsible "Dr. Schmidt" --stage restricted
  kin create scout --from-template ./t/scout --parent 1 --policy scout.yaml --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes one NAME (e.g. %s writer-2 --from-template DIR), not %d arguments", cmd.CommandPath(), cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			return a.register(cmd, &req, &perm)
		}),
	}
	f := cmd.Flags()
	f.Var(a.idFlag(&req.Parent, "parent", true), "parent", "the parent agent's `ID` (omit or 0 for a root)")
	f.StringVar(&req.Role, "role", "", "the agent's `role` (default: the template's, else derived from the name where the profile has roles)")
	f.StringVar(&req.Responsible, "responsible", "", "the accountable `party`, a human or organisation (children inherit their parent's; a root defaults to the operator's login name, or kin serve --default-responsible)")
	perm.add(f, "from-template")
	cmd.MarkFlagRequired("from-template")
	return cmd
}
