package cli

import (
	"fmt"
	"io"
	"slices"
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
func writeAgent(w io.Writer, a *kin.Agent) error { return writeAgentRows(w, a, nil) }

// writeAgentRows is writeAgent with more rows after the agent's own, in
// the same columns.
func writeAgentRows(w io.Writer, a *kin.Agent, more func(row func(k, v string))) error {
	tw := newTabWriter(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", a.ID.String())
	row("Name", a.Name)
	row("Role", orDash(a.Role))
	row("Parent", parentString(a.Parent))
	if a.RequestedBy != 0 {
		// Seed 002 §4.1: its spawn was escalated to its parent.
		row("Requested by", fmt.Sprintf("agent %d (its spawn was escalated to its parent; it has no more than agent %d)", a.RequestedBy, a.RequestedBy))
	}
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
	writeRuntime(row, a)
	if a.Session != "" {
		row("Session", a.Session)
	}
	if a.Result != "" {
		row("Result", string(a.Result))
	}
	if a.Stage != "" {
		row("Stage", a.Stage)
	}
	if more != nil {
		more(row)
	}
	return tw.Flush()
}

// writeRuntime adds a spawned agent's process to writeAgent's rows.
func writeRuntime(row func(k, v string), a *kin.Agent) {
	if len(a.Command) > 0 {
		row("Command", commandString(a.Command))
	}
	if a.Running() {
		row("PID", strconv.Itoa(a.PID))
	}
	if a.Reconciling {
		row("Process", "unchecked: the daemon restarted and has not yet checked whether it still runs")
	}
	if !a.StartedAt.IsZero() {
		row("Started", formatTime(a.StartedAt))
	}
	if a.Restart != "" {
		row("Restart", string(a.Restart))
	}
	if len(a.Command) > 0 {
		row("Grace", time.Duration(a.Grace).String())
	}
	if a.Replaces != 0 {
		row("Replaces", a.Replaces.String())
	}
	if !a.LastHeartbeat.IsZero() {
		row("Last heartbeat", formatTime(a.LastHeartbeat))
	}
	if a.Cursor != "" {
		row("Cursor", kvString(a.Cursor))
	}
	if !a.EndedAt.IsZero() {
		row("Ended", formatTime(a.EndedAt))
	}
	if a.Exit != nil {
		row("Exit", a.Exit.String())
	}
	if a.EndReason != "" {
		row("End reason", a.EndReason)
	}
}

// commandString shows a command line as a shell would take it back:
// arguments with spaces, quotes or other special characters are quoted.
func commandString(argv []string) string {
	out := make([]string, len(argv))
	for i, s := range argv {
		out[i] = shellQuote(s)
	}
	return strings.Join(out, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pidString is the pid of a running agent, or "-".
func pidString(a *kin.Agent) string {
	if !a.Running() {
		return "-"
	}
	return strconv.Itoa(a.PID)
}

// endString says how an ended agent's process ended, e.g. "exit 0 (exited)"
// or "signal killed (stopped)"; "-" while it runs or if it never ran.
func endString(a *kin.Agent) string {
	var parts []string
	if a.Exit != nil {
		parts = append(parts, a.Exit.String())
	}
	if a.EndReason != "" {
		if len(parts) > 0 {
			parts = append(parts, "("+a.EndReason+")")
		} else {
			parts = append(parts, a.EndReason)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// writeAgentTable prints agents as the table of `kin ps`.
func writeAgentTable(w io.Writer, agents []*kin.Agent) error {
	tw := newTabWriter(w)
	fleet := kin.SpansHosts(slices.Values(agents))
	head := "ID\tNAME\tROLE\tPARENT\tGEN\tSTATUS\tSTATE\tPID\tEND\tRESPONSIBLE"
	if fleet {
		head += "\tHOST"
	}
	fmt.Fprintln(tw, head)
	for _, a := range agents {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s",
			a.ID, a.Name, orDash(a.Role), parentString(a.Parent), a.Generation, a.Status, stateString(a),
			pidString(a), endString(a), orDash(a.Responsible))
		if fleet {
			fmt.Fprintf(tw, "\t%s", orDash(a.Host))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// stateString is an agent's state, marked "unchecked" while a restarted
// daemon has not yet checked its process.
func stateString(a *kin.Agent) string {
	if a.Reconciling {
		return string(a.State) + " (unchecked)"
	}
	return string(a.State)
}

// plural returns "1 child", "2 children".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// spendString is a subtree's spend against its budget, as kin tree, kin
// show and kin usage print it: "tokens 1200/5000 cost 0.40/1.00 spawns
// 3/10", only the parts that have a budget or something spent, then the
// deadline and why the subtree was stopped; "" when there is nothing to say.
func spendString(s *kin.Spend) string {
	if s == nil {
		return ""
	}
	var parts []string
	switch {
	case s.MaxTokens != nil:
		parts = append(parts, fmt.Sprintf("tokens %d/%d", s.SubtreeTokens, *s.MaxTokens))
	case s.SubtreeTokens != 0:
		parts = append(parts, fmt.Sprintf("tokens %d", s.SubtreeTokens))
	}
	switch {
	case s.MaxCost != nil:
		parts = append(parts, "cost "+costString(s.SubtreeCost)+"/"+costString(*s.MaxCost))
	case s.SubtreeCost != 0:
		parts = append(parts, "cost "+costString(s.SubtreeCost))
	}
	switch {
	case s.MaxDescendants != nil:
		parts = append(parts, fmt.Sprintf("spawns %d/%d", s.SubtreeSpawns, *s.MaxDescendants))
	case s.SubtreeSpawns != 0:
		parts = append(parts, fmt.Sprintf("spawns %d", s.SubtreeSpawns))
	}
	if !s.DeadlineAt.IsZero() {
		parts = append(parts, "deadline "+formatTime(s.DeadlineAt))
	}
	if s.Exhausted != "" {
		parts = append(parts, "exhausted: "+oneLine(s.Exhausted))
	}
	return strings.Join(parts, " ")
}

// costString prints a cost to the cent, or to three significant digits
// when it is less than a cent, so that a small spend does not show as 0.00.
func costString(c float64) string {
	if c != 0 && c > -0.01 && c < 0.01 {
		return strconv.FormatFloat(c, 'g', 3, 64)
	}
	return strconv.FormatFloat(c, 'f', 2, 64)
}
