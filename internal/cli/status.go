package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's status",
		Long: `Show the running daemon: version, pid, home, where it listens, its store and
governor profile, how many agents it holds and the last event's sequence
number.`,
		Example: `  kin status
  kin status --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			st, err := svc.Status(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(st)
			}
			httpAddr := st.HTTP
			if httpAddr == "" {
				httpAddr = "off"
			}
			tw := newTabWriter(a.env.Stdout)
			row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
			row("Version", st.Version)
			row("PID", strconv.Itoa(st.PID))
			row("Started", formatTime(st.StartedAt))
			row("Home", st.Home)
			row("Socket", st.Socket)
			row("HTTP", httpAddr)
			row("Store", st.Store)
			row("Profile", st.Profile)
			row("Agents", strconv.Itoa(st.Agents))
			row("Last event", strconv.FormatInt(st.LastEvent, 10))
			return tw.Flush()
		}),
	}
}
