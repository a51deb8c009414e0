package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) stopCommand() *cobra.Command {
	var req kin.StopRequest
	cmd := &cobra.Command{
		Use:   "stop ID [--grace DUR]",
		Short: "Stop an agent's process and cancel its owned subtree",
		Long: `Stop agent ID and every descendant it owns (detached descendants, and
theirs, go on running): kin marks them stopping, closes their sockets, sends
SIGTERM to their processes, waits up to the grace, sends SIGKILL to whatever
is left, and returns once every process has ended. The agents end cancelled,
with the end reason "stopped", and the event log gets agent.child.cancel and
agent.stop for them.

The grace is each agent's own ("kin spawn --grace", default 5s) unless
--grace overrides it for all of them; --grace 0s kills at once.

Prints the agents stopped (with --json, an array of them). An agent may stop
only its descendants; stopping an agent that has already ended fails with
invalid_transition.`,
		Example: `  kin stop 7
  kin stop 1 --grace 0s          # kill the whole owned subtree at once
  kin stop 7 --grace 30s --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			req.ID = id
			stopped, err := svc.Stop(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.printAgents(stopped, "agent", "agents", "stopped")
		}),
	}
	cmd.Flags().Var(durationFlag{d: &req.Grace}, "grace", "time between SIGTERM and SIGKILL for every agent stopped (default: each agent's own; 0s kills at once)")
	return cmd
}
