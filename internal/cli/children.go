package cli

import (
	"fmt"

	"github.com/spf13/cobra"
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
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := parseIDArg(args[0])
			if err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			kids, err := svc.Children(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(nonNil(kids))
			}
			if len(kids) > 0 {
				if err := writeAgentTable(a.env.Stdout, kids); err != nil {
					return err
				}
			}
			_, err = fmt.Fprintln(a.env.Stdout, plural(len(kids), "child", "children"))
			return err
		}),
	}
}
