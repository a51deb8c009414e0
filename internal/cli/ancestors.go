package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) ancestorsCommand() *cobra.Command {
	var proof bool
	cmd := &cobra.Command{
		Use:   "ancestors ID [--proof]",
		Short: "Show the chain of responsibility from an agent up to its root",
		Long: `Show the responsibility chain: the agent itself, then its parent, and so on
up to its root, one line per link with the party responsible for it. With
--json: an array in the same order, the agent first.

With --proof: a JSON chain proof instead, each link with the inclusion proof
of its agent.registered event in the verifiable event log, all against one
signed checkpoint. "kin log verify-proof FILE --key KEY" checks it with
nothing but the log's public key, so "agent 7 was spawned by 3, which
Dr. Schmidt is responsible for" holds for someone who trusts only that key.`,
		Example: `  kin ancestors 7
    #7 LaTeX-Formatter (gen 2) responsible: Dr. Schmidt
    #3 Report-Writer (gen 1) responsible: Dr. Schmidt
    #1 Research-Coordinator (gen 0) responsible: Dr. Schmidt
  kin ancestors 7 --json
  kin ancestors 7 --proof > chain.json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			if proof {
				p, err := svc.AncestryProof(cmd.Context(), id)
				if err != nil {
					return err
				}
				return a.printJSON(p)
			}
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
	cmd.Flags().BoolVar(&proof, "proof", false, "print the chain with an inclusion proof of each link's registration (JSON)")
	return cmd
}
