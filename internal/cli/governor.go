package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/kin"
)

func (a *app) governorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "governor",
		Short: "Show or change the governor's spawning rules",
		Long: `The governor decides whether an agent may be registered: how deep the lineage
may go, how many live children a parent may have, which roles may spawn which,
how many agents of a role may exist, and when a parent that keeps being
refused is cut off for a while (the circuit breaker). Its rules come from the
profile "kin serve --profile" loaded; the operator may change some of them at
runtime with "kin governor set" (kept across restarts), and put back to the
profile's value with "kin governor reset".`,
		Example: `  kin governor show
  kin governor set max_generation_depth=5`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error { return cmd.Help() }),
	}
	cmd.AddCommand(a.governorShowCommand(), a.governorSetCommand(), a.governorResetCommand())
	return cmd
}

func (a *app) governorShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the governor's rules in force",
		Long: `Show the rules in force: the profile and where it came from, the generation
depth and children limits, the roles with who may spawn whom and how many may
exist, the circuit breaker, and the operator's runtime overrides.`,
		Example: `  kin governor show
  kin governor show --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			g, err := svc.Governor(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(g)
			}
			return writeGovernor(a.env.Stdout, g)
		}),
	}
}

func (a *app) governorSetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "set KEY=VALUE",
		Short: "Change a governor setting at runtime",
		Long: `Change one governor setting. The change applies to the next registration,
is recorded as a governor.changed event, and is kept across restarts.

Settings: ` + strings.Join(kin.GovernorSettings, ", ") + ` (whole numbers;
max_children 0 means no limit). Prints the rules now in force.`,
		Example: `  kin governor set max_generation_depth=5
  kin governor set max_children=0 --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes one KEY=VALUE argument (e.g. max_generation_depth=5), not %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			key, value, err := parseSetting(args[0])
			if err != nil {
				return err
			}
			svc, err := a.service()
			if err != nil {
				return err
			}
			g, err := svc.SetGovernor(cmd.Context(), key, value)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(g)
			}
			fmt.Fprintf(a.env.Stdout, "set %s=%s\n\n", key, value)
			return writeGovernor(a.env.Stdout, g)
		}),
	}
}

func (a *app) governorResetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reset KEY",
		Short: "Put a governor setting back to the profile's value",
		Long: `Undo "kin governor set KEY=...": the setting takes the value of the profile
kin serve was started with again, recorded as a governor.changed event; the
override is forgotten, also across restarts.

Settings: ` + strings.Join(kin.GovernorSettings, ", ") + `. Prints the rules now in force.`,
		Example: `  kin governor reset max_generation_depth`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s takes one KEY (one of %s), not %d arguments", cmd.CommandPath(), strings.Join(kin.GovernorSettings, ", "), len(args))
			}
			if !slices.Contains(kin.GovernorSettings, args[0]) {
				return usageErrorf("argument %q: unknown governor setting (keys: %s)", args[0], strings.Join(kin.GovernorSettings, ", "))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			svc, err := a.service()
			if err != nil {
				return err
			}
			g, err := svc.SetGovernor(cmd.Context(), args[0], kin.GovernorReset)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(g)
			}
			fmt.Fprintf(a.env.Stdout, "reset %s to the profile's value\n\n", args[0])
			return writeGovernor(a.env.Stdout, g)
		}),
	}
}

// parseSetting splits KEY=VALUE; a malformed argument is a usage error.
func parseSetting(arg string) (key, value string, err error) {
	key, value, ok := strings.Cut(arg, "=")
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	known := strings.Join(kin.GovernorSettings, ", ")
	switch {
	case !ok || key == "" || value == "":
		return "", "", usageErrorf("argument %q is not KEY=VALUE (e.g. max_generation_depth=5; keys: %s)", arg, known)
	case !slices.Contains(kin.GovernorSettings, key):
		return "", "", usageErrorf("argument %q: unknown governor setting %q (keys: %s)", arg, key, known)
	}
	if _, err := strconv.Atoi(value); err != nil {
		return "", "", usageErrorf("argument %q: the value %q is not a whole number", arg, value)
	}
	return key, value, nil
}

// writeGovernor prints the rules in force.
func writeGovernor(w io.Writer, g *kin.GovernorInfo) error {
	p := g.Profile
	tw := newTabWriter(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	profile := p.Name
	if g.Source != "" && g.Source != p.Name {
		profile += " (from " + g.Source + ")"
	}
	row("profile", profile)
	if p.Description != "" {
		row("description", p.Description)
	}
	row("max_generation_depth", fmt.Sprintf("%d (roots are generation 0)%s", p.MaxGenerationDepth, overridden(g, "max_generation_depth")))
	children := strconv.Itoa(p.MaxChildren)
	if p.MaxChildren == 0 {
		children = "0 (no limit)"
	}
	row("max_children", children+" live children per parent"+overridden(g, "max_children"))
	cb := p.CircuitBreaker
	if cb.MaxRejections == 0 {
		row("circuit_breaker", "off")
	} else {
		row("circuit_breaker", fmt.Sprintf("more than %d refused spawns within %s block the parent's spawns for %s",
			cb.MaxRejections, time.Duration(cb.Window), time.Duration(cb.Cooldown)))
	}
	row("allow_detach", yesNo(p.AllowDetach)+" (detached children, which outlive their parent)")
	if p.HostLoss == kin.HostLossCancel { // the default (run) is not shown
		row("host_loss", "cancel (when a host of the fleet dies, its agents' owned children on other hosts are cancelled)")
	}
	if hb := p.Heartbeat; hb.Window > 0 {
		row("heartbeat", fmt.Sprintf("an agent that has heartbeated is stale after %s without one, offline after %d such windows",
			time.Duration(hb.Window), hb.OfflineAfter))
	}
	if rs := p.Restart; rs.Period > 0 {
		row("restart", fmt.Sprintf("at most %d replacements of an agent within %s, then it has failed", rs.MaxRestarts, time.Duration(rs.Period)))
	}
	if len(p.Roles) == 0 {
		row("roles", "any (any role may spawn any role)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Roles) > 0 {
		fmt.Fprintln(w, "\nroles:")
		tw = newTabWriter(w)
		fmt.Fprintln(tw, "  ROLE\tROOT\tCARDINALITY\tSPAWNS\tESCALATES")
		for _, name := range slices.Sorted(maps.Keys(p.Roles)) {
			r := p.Roles[name]
			card := string(r.Cardinality)
			if card == "" {
				card = "any"
			}
			spawns := strings.Join(r.Spawns, ", ")
			if spawns == "" {
				spawns = "(none)"
			}
			escalates := "-"
			if len(r.Escalates) > 0 {
				escalates = strings.Join(r.Escalates, ", ") + " (to an ancestor)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", name, yesNo(r.Root), card, spawns, escalates)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(g.Overrides) > 0 {
		fmt.Fprintln(w, "\noverrides (kin governor set):")
		for _, k := range slices.Sorted(maps.Keys(g.Overrides)) {
			fmt.Fprintf(w, "  %s=%s\n", k, g.Overrides[k])
		}
	}
	return nil
}

func overridden(g *kin.GovernorInfo, key string) string {
	if _, ok := g.Overrides[key]; ok {
		return " [overridden]"
	}
	return ""
}
