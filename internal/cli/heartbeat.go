package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) heartbeatCommand() *cobra.Command {
	var req kin.HeartbeatRequest
	cmd := &cobra.Command{
		Use:   "heartbeat [--cursor C] [--id ID]",
		Short: "Report an agent alive, and where it has got to",
		Long: `Tell kin an agent is alive. Run by an agent (KIN_SOCKET is set in its
environment), it heartbeats that agent. The operator heartbeats for an agent
with --id: one kin did not spawn, or one that cannot run kin itself.

Once an agent has heartbeated, kin expects it to keep doing so within the
profile's heartbeat window ("kin governor show"): after one missed window it
becomes stale, after offline_after missed windows offline, and an offline
agent is stopped, then replaced if its restart policy says so.

--cursor records where the agent has got to (a page, an offset, a task id):
a replacement finds the last one in KIN_RESUME_CURSOR. Without --cursor the
last one stays.

Prints the agent's id, name, state, last heartbeat and cursor (with --json,
the agent).`,
		Example: `  kin heartbeat                          # inside an agent
  kin heartbeat --cursor page-42
  kin heartbeat --id 7 --cursor "$(cat progress)"   # the operator, for agent 7`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			ag, err := svc.Heartbeat(cmd.Context(), req)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(ag)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "#%d %s  state=%s last_heartbeat=%s", ag.ID, ag.Name, ag.State, formatTime(ag.LastHeartbeat))
			if ag.Cursor != "" {
				b.WriteString(" cursor=" + kvString(ag.Cursor))
			}
			_, err = fmt.Fprintln(a.env.Stdout, b.String())
			return err
		}),
	}
	cmd.Flags().StringVar(&req.Cursor, "cursor", "", "where the agent has got to, for a replacement to resume from (`text`, at most 4096 bytes)")
	cmd.Flags().Var(a.idFlag(&req.ID, "id", false), "id", "the agent `ID` to heartbeat for (the operator's way; inside an agent, the default is the agent itself)")
	return cmd
}
