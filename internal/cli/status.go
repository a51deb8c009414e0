package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's status",
		Long: `Show the running daemon: version, pid, home, where it listens, its store and
governor profile, how many agents it holds and how many of them run, how it
contains their processes, and the last event's sequence number. Just after
a restart, Reconciling counts the agents an earlier daemon left running
that this one has not yet checked (it serves while it checks them).

Containment is "cgroup2" (every agent in its own cgroup under the cgroup
root, nested like the lineage: a stop reaches every process an agent
started) or "process-groups", the fallback where no writable cgroup v2
exists, with the reason (a process that leaves its group escapes a stop).

Agent uids is the daemon's uid range, START:COUNT: agent N runs as uid and
gid START+N (a root daemon); or "the daemon's user".`,
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
			if st.Host != "" {
				row("Host", st.Host)
			}
			row("Profile", st.Profile)
			row("Agents", strconv.Itoa(st.Agents))
			row("Running", strconv.Itoa(st.Running))
			if st.Reconciling > 0 {
				row("Reconciling", plural(st.Reconciling, "agent", "agents")+" not yet checked since the restart (re-adopted or recorded lost in the background)")
			}
			row("Containment", containmentString(st.Containment, st.ContainmentReason))
			if st.CgroupRoot != "" {
				row("Cgroup root", st.CgroupRoot)
			}
			if st.Sandbox != "" {
				row("Sandbox", st.Sandbox)
			}
			for _, m := range st.Missing {
				row("Missing", m)
			}
			row("Agent uids", agentUIDsString(st.AgentUIDRange))
			row("Last event", strconv.FormatInt(st.LastEvent, 10))
			return tw.Flush()
		}),
	}
}

// containmentString is the containment in force, with why when there is a
// reason (the fallback, or a forced choice).
func containmentString(containment, reason string) string {
	if containment == "" {
		containment = "unknown"
	}
	if reason != "" {
		return containment + " (" + reason + ")"
	}
	return containment
}

// agentUIDsString says which uids agents run as.
func agentUIDsString(r string) string {
	if r == "" {
		return "the daemon's user"
	}
	start, count, _ := strings.Cut(r, ":")
	return r + " (agent N runs as uid and gid " + start + "+N, N < " + count + ")"
}
