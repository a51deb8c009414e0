package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) psCommand() *cobra.Command {
	var f kin.AgentFilter
	cmd := &cobra.Command{
		Use:   "ps [flags]",
		Short: "List agents",
		Long: `List agents, by id, as a table: ID NAME ROLE PARENT GEN STATUS STATE PID END RESPONSIBLE
(PID: its process while one runs; END: how it ended).
Flags narrow the list; they combine with "and".`,
		Example: `  kin ps
  kin ps --status suspended
  kin ps --parent 0            # roots only
  kin ps --responsible "Dr. Schmidt" --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			f.HasParent = cmd.Flags().Changed("parent")
			svc, err := a.service()
			if err != nil {
				return err
			}
			agents, err := svc.Agents(cmd.Context(), f)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(nonNil(agents))
			}
			return writeAgentTable(a.env.Stdout, agents)
		}),
	}
	fl := cmd.Flags()
	fl.Var(newEnumFlag(&f.Status, allStatuses...), "status", "only agents with this `status`: "+joinStrings(allStatuses))
	fl.Var(newEnumFlag(&f.State, allStates...), "state", "only agents in this runtime `state`: "+joinStrings(allStates))
	fl.StringVar(&f.Role, "role", "", "only agents with this `role`")
	fl.Var(a.idFlag(&f.Parent, "parent", true), "parent", "only the children of this agent `ID` (0: only roots)")
	fl.StringVar(&f.Responsible, "responsible", "", "only agents this `party` is responsible for")
	return cmd
}
