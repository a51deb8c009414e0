package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) promoteCommand() *cobra.Command {
	var stage string
	cmd := &cobra.Command{
		Use:   "promote ID --stage S",
		Short: "Move an agent to another stage",
		Long: `Move agent ID to stage S: the preset its tools follow from now on (seed
003's stages; kin ships restricted, supervised and full, and the operator's
configuration may define others). Only the agent's parent or the operator
may promote it, and the stage's preset may not give the agent more than its
parent holds: that is refused with permission_escalation, listing every
item. The change is recorded as an agent.promoted event.

Prints the agent, with its new stage (with --json, the agent).

Exit status: 0 when the agent was promoted, 1 when it was not (the error
says why), 2 when the command line is wrong.`,
		Example: `  kin promote 7 --stage supervised
  kin promote '#7' --stage full --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			if stage == "" {
				return usageErrorf("--stage needs a stage name, e.g. --stage supervised")
			}
			ag, err := svc.Promote(cmd.Context(), kin.PromoteRequest{Agent: id, Stage: stage})
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ag)
			}
			return writeAgent(a.env.Stdout, ag)
		}),
	}
	cmd.Flags().StringVar(&stage, "stage", "", "the agent's new `stage`")
	cmd.MarkFlagRequired("stage")
	return cmd
}
