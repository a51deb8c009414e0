package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) showCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show one agent",
		Long: `Show one agent: its lineage (parent, generation), its responsible party,
its status (active, suspended, revoked, terminated), its runtime state and
the rest of what it was registered with.`,
		Example: `  kin show 7
  kin show '#7' --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			ag, err := svc.Agent(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ag)
			}
			return writeAgent(a.env.Stdout, ag)
		}),
	}
}
