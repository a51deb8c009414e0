package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) ancestorsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "ancestors ID",
		Short: "Show the chain of responsibility from an agent up to its root",
		Long: `Show the responsibility chain: the agent itself, then its parent, and so on
up to its root, one line per link with the party responsible for it. With
--json: an array in the same order, the agent first.`,
		Example: `  kin ancestors 7
    #7 LaTeX-Formatter (gen 2) responsible: Dr. Schmidt
    #3 Report-Writer (gen 1) responsible: Dr. Schmidt
    #1 Research-Coordinator (gen 0) responsible: Dr. Schmidt
  kin ancestors 7 --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			chain, err := svc.Ancestors(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(nonNil(chain))
			}
			for _, ag := range chain {
				if _, err := fmt.Fprintf(a.env.Stdout, "#%d %s (gen %d) responsible: %s\n", ag.ID, ag.Name, ag.Generation, ag.Responsible); err != nil {
					return err
				}
			}
			return nil
		}),
	}
}
