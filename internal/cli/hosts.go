package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func (a *app) hostsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "hosts",
		Short: "List the fleet's hosts",
		Long: `List every kin serve that shares this daemon's store (a fleet: one kin serve
per machine, all on one PostgreSQL database; kin serve --store postgres://...),
by name, with its lease: "live" while its daemon renews it (every third of
the lease, 15 s by default), "expired" after a crash or a lost link to the
store, "released" after a clean stop. A daemon on its own store (the
embedded SQLite) is a fleet of one. The host marked * answered.

Each host is named by kin serve --host-name (default: the machine's host
name); a second daemon (another home) asking for a name whose lease runs
is refused. AGENTS counts each host's live agents. Operator only.`,
		Example: `  kin hosts
  kin hosts --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			hs, err := svc.Hosts(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(hs)
			}
			tw := newTabWriter(a.env.Stdout)
			fmt.Fprintln(tw, "HOST\tLEASE\tAGENTS\tCONTAINMENT\tADDRESS\tRENEWED\tSTARTED")
			for _, h := range hs {
				name := h.Name
				if h.Self {
					name += " *"
				}
				lease := "live"
				switch {
				case h.LeaseUntil.IsZero():
					lease = "released"
				case !h.Live:
					lease = "expired"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, lease, strconv.Itoa(h.Agents), dash(h.Containment), dash(h.Address),
					formatTime(h.RenewedAt), formatTime(h.StartedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(a.env.Stdout, plural(len(hs), "host", "hosts"))
			return nil
		}),
	}
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
