package cli

import (
	"github.com/spf13/cobra"
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
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := parseIDArg(args[0])
			if err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
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
