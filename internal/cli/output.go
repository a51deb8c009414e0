package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kin-agents/kin/kin"
)

// timeFormat is how the CLI prints times: UTC, to the millisecond.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeFormat)
}

func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// orDash shows an empty value as "-" so that table columns stay aligned.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parentString(id kin.AgentID) string {
	if id == 0 {
		return "-"
	}
	return id.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// writeAgent prints one agent, a field per line.
func writeAgent(w io.Writer, a *kin.Agent) error {
	tw := newTabWriter(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", a.ID.String())
	row("Name", a.Name)
	row("Role", orDash(a.Role))
	row("Parent", parentString(a.Parent))
	row("Generation", strconv.Itoa(a.Generation))
	row("Responsible", a.Responsible)
	row("Status", string(a.Status))
	row("State", string(a.State))
	row("Life", string(a.Life))
	row("Self-modifying", yesNo(a.SelfModifying))
	if a.Wallet != "" {
		row("Wallet", a.Wallet)
	}
	if a.ConstitutionHash != "" {
		row("Constitution", a.ConstitutionHash)
	}
	if a.CapabilityHash != "" {
		row("Capability", a.CapabilityHash)
	}
	if a.Scope != "" {
		// Scope may span lines: indent the continuation under the value.
		row("Scope", strings.ReplaceAll(a.Scope, "\n", "\n\t"))
	}
	row("Created", formatTime(a.CreatedAt)+" by "+a.CreatedBy)
	row("Updated", formatTime(a.UpdatedAt))
	if !a.SpawnBlockedUntil.IsZero() {
		row("Spawns blocked until", formatTime(a.SpawnBlockedUntil))
	}
	return tw.Flush()
}

// writeAgentTable prints agents as the table of `kin ps`.
func writeAgentTable(w io.Writer, agents []*kin.Agent) error {
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tPARENT\tGEN\tSTATUS\tSTATE\tRESPONSIBLE")
	for _, a := range agents {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
			a.ID, a.Name, orDash(a.Role), parentString(a.Parent), a.Generation, a.Status, a.State, orDash(a.Responsible))
	}
	return tw.Flush()
}

// plural returns "1 child", "2 children".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
