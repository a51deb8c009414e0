package cli

import (
	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) stopCommand() *cobra.Command {
	var req kin.StopRequest
	cmd := &cobra.Command{
		Use:   "stop ID [ID...] [--grace DUR]",
		Short: "Stop agents' processes and cancel their owned subtrees",
		Long: `Stop agent ID and every descendant it owns (detached descendants, and
theirs, go on running): kin marks them stopping, closes their sockets, sends
SIGTERM to their processes, waits up to the grace, sends SIGKILL to whatever
is left, and returns once every process has ended. The agents end cancelled,
with the end reason "stopped", and the event log gets agent.child.cancel and
agent.stop for them.

Several agents are stopped at once, side by side (at most 16 stops in flight),
and the command returns once all have ended. An agent named twice, or inside
the owned subtree of another one named, is stopped once. Every ID is read
first: one that names no agent (or a name the caller cannot see) stops
nothing.

The grace is each agent's own ("kin spawn --grace", default 5s) unless
--grace overrides it for all of them; --grace 0s kills at once.

Prints the agents stopped (with --json, an array of them, by id). An agent
may stop only its descendants; stopping an agent that has already ended fails
with invalid_transition. Where some of several agents could not be stopped,
the others still are: the command prints those stopped (with --json, their
array on stdout), then fails (exit 1) with an error that names every agent
not stopped and carries the first one's code. Interrupted (Ctrl-C), it sends
no more stops; the daemon still finishes those it received.`,
		Example: `  kin stop 7
  kin stop 1 --grace 0s          # kill the whole owned subtree at once
  kin stop 3 8 12 --grace 0s     # three subtrees, side by side
  kin stop 7 --grace 30s --json`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s takes one or more agent IDs (e.g. %s 7)", cmd.CommandPath(), cmd.CommandPath())
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			// Every argument is read before anything is stopped: a bad one
			// changes nothing.
			ids := make([]kin.AgentID, len(args))
			for i, s := range args {
				id, err := a.agentArg(cmd.Context(), s)
				if err != nil {
					return err
				}
				ids[i] = id
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			stopped, err := kin.StopAll(cmd.Context(), svc, ids, req)
			if err != nil && len(stopped) == 0 {
				return err
			}
			if perr := a.printAgents(stopped, "agent", "agents", "stopped"); perr != nil {
				return perr
			}
			return err
		}),
	}
	cmd.Flags().Var(durationFlag{d: &req.Grace}, "grace", "time between SIGTERM and SIGKILL for every agent stopped (default: each agent's own; 0s kills at once)")
	return cmd
}
