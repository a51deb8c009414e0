package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) childrenCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "children ID",
		Short: "List an agent's direct children",
		Long: `List the agents that ID spawned directly, as the table of "kin ps", then a
count. "kin tree ID" shows the whole subtree.`,
		Example: `  kin children 1
  kin children 1 --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			kids, err := svc.Children(cmd.Context(), id)
			if err != nil {
				return err
			}
			return a.printAgents(kids, "child", "children", "")
		}),
	}
}
