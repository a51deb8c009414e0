package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) logsCommand() *cobra.Command {
	var req kin.LogsRequest
	cmd := &cobra.Command{
		Use:   "logs ID [--follow] [--offset N]",
		Short: "Print what an agent's process wrote",
		Long: `Print the output of agent ID's process: its stdout and stderr, interleaved
as it wrote them, byte for byte (--json changes nothing). kin keeps the
output in its home, also after the agent has ended: logs/ID.log, rotated
at the profile's quotas.log_bytes to logs/ID.log.1 (and .1 to .2 ...),
the oldest dropped past quotas.log_keep; this prints what is kept when it
starts, the oldest first, and ends there (what the agent writes meanwhile
is not printed: at most log_bytes × (1 + log_keep) is). An agent may have
at most 16 reads of logs (and followed events or inbox) open at once; past
that kin refuses with rate_limited.

With --follow keep printing new output as it comes, across rotations,
until the agent has ended and everything was printed (then exit 0), or
until interrupted (Ctrl-C, also exit 0). --offset skips that many bytes of
what is kept, e.g. what an earlier run already printed (once a rotation
dropped old output, offsets count from the oldest byte still kept).`,
		Example: `  kin logs 7
  kin logs 7 --follow
  kin logs 7 --offset 1048576 | less`,
		Annotations: map[string]string{annotationArgs: argsID},
		Args:        idArgs,
		RunE: a.runOnID(func(cmd *cobra.Command, svc kin.Service, id kin.AgentID) error {
			req.ID = id
			ctx := cmd.Context()
			err := svc.Logs(ctx, req, func(b []byte) error {
				_, err := a.env.Stdout.Write(b)
				return err
			})
			if req.Follow && errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // interrupted: the normal way to stop following
			}
			return err
		}),
	}
	cmd.Flags().BoolVarP(&req.Follow, "follow", "f", false, "keep printing new output until the agent has ended")
	cmd.Flags().Var(nonNegFlag{n: &req.Offset}, "offset", "skip this many bytes of the output")
	return cmd
}
