package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/top"
	"github.com/kin-agents/kin/kin"
)

func (a *app) topCommand() *cobra.Command {
	var opt top.Options
	cmd := &cobra.Command{
		Use:   "top [--root ID]",
		Short: "Watch the lineage tree live, and stop, suspend or resume agents in it",
		Long: `Show the lineage tree in the terminal and keep it current: every agent with
its role, status, state and pid (and its responsible party on the roots, and
wherever it differs from the parent's), the states coloured, and a header
counting the agents by state. The screen follows the event log and reloads
the agents on every change (at most ten times a second). With --root, only
that agent's subtree.

Keys:
  ↑ ↓ k j        select the previous or next agent
  PgUp PgDn      a screen up or down
  Home End g G   the first or last agent
  Enter Space    fold or unfold the selected agent's subtree (a folded
                 agent shows +N, the number of agents hidden under it)
  ← → h l        fold, unfold
  /              search: type part of a name, Enter selects the next agent
                 whose name contains it (unfolding its ancestors)
  n              the next match of the last search
  s              stop the selected agent and its owned subtree (kin stop)
  p  P           suspend it, or (P) it and its subtree (kin suspend --cascade)
  r  R           resume it, or (R) it and its subtree (kin resume --cascade)
  Esc            clear the message line
  q  Ctrl-C      quit

Every action first asks in the footer, naming what it affects ("Stop #2
Data-Collector and its 2 descendants? y/n"); y does it, any other key does
not. The daemon's answer, or its error, shows in the footer.

kin top needs a terminal; "kin tree" draws the tree once, and "kin events
--follow" streams the changes, for scripts.`,
		Example: `  kin top
  kin top --root 2
  KIN_HOME=/srv/kin kin top`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if a.jsonOut {
				return usageErrorf(`kin top is interactive and has no JSON output: use "kin tree --json" or "kin events --follow --json"`)
			}
			svc, err := a.topService()
			if err != nil {
				return err
			}
			if a.env.Service == nil {
				opt.Where = a.daemonWhere()
			}
			return top.Run(cmd.Context(), svc, opt, a.env.Stdin, a.env.Stdout)
		}),
	}
	cmd.Flags().Var(a.idFlag(&opt.Root, "root", false), "root", "show only the subtree of this agent `ID`")
	return cmd
}

// topService is the service, once the terminal is known to be there: with
// no terminal kin top says so before trying to reach the daemon.
func (a *app) topService() (kin.Service, error) {
	if err := top.CheckTerminal(a.env.Stdin, a.env.Stdout); err != nil {
		return nil, err
	}
	return a.service()
}

// daemonWhere names the daemon the way client.FromEnv finds it, for the
// header.
func (a *app) daemonWhere() string {
	if s := os.Getenv("KIN_SOCKET"); s != "" {
		return "socket " + s
	}
	if s := os.Getenv("KIN_ADDR"); s != "" {
		return "kin at " + s
	}
	home := a.home
	if home == "" {
		home = os.Getenv("KIN_HOME")
	}
	if home == "" {
		return "" // ~/.kin: the daemon's status names it
	}
	return "home " + home
}
