package top

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/kin-agents/kin/kin"
)

// The screen: a header and the column headings, the tree, and two footer
// lines (the note or question, then the keys).
const (
	headLines = 2
	footLines = 2
	gap       = "  "
	marker    = "> " // before the selected row, for terminals without colour
)

// bodyHeight is the number of tree rows on screen.
func (m *Model) bodyHeight() int { return max(1, m.height-headLines-footLines) }

// columns are the widths of the row's cells, measured over every row (not
// only those on screen) so that scrolling does not shift them.
// host is 0 when there is no HOST column: the agents shown run on one
// host (as kin ps, a fleet's column appears only when they span hosts).
type columns struct{ tree, role, status, state, pid, host int }

// measure sizes the columns for m.rows.
func (m *Model) measure() columns {
	c := columns{tree: len("AGENT"), role: len("ROLE"), status: len("STATUS"), state: len("STATE"), pid: len("PID")}
	fleet := kin.SpansHosts(maps.Values(m.f.agents))
	if fleet {
		c.host = len("HOST")
	}
	for _, r := range m.rows {
		a := m.f.agents[r.id]
		tree, fold := treeCells(r, a)
		c.tree = max(c.tree, lipgloss.Width(tree+fold))
		c.role = max(c.role, lipgloss.Width(orDash(a.Role)))
		c.status = max(c.status, len(a.Status))
		c.state = max(c.state, len(a.State))
		c.pid = max(c.pid, len(pidCell(a)))
		if fleet {
			c.host = max(c.host, lipgloss.Width(orDash(a.Host)))
		}
	}
	return c
}

// hostCell is the HOST column's cell, with its gap ("" without the column).
func (c columns) hostCell(s string) string {
	if c.host == 0 {
		return ""
	}
	return pad(s, c.host) + gap
}

// treeCells are the tree column's two parts: the glyphs and the agent, and
// "+N" when it is folded ("" otherwise).
func treeCells(r row, a *kin.Agent) (tree, fold string) {
	tree = r.prefix + "#" + a.ID.String() + " " + a.Name
	if r.hidden > 0 {
		fold = " +" + strconv.Itoa(r.hidden)
	}
	return tree, fold
}

func pidCell(a *kin.Agent) string {
	if a.Running() {
		return strconv.Itoa(a.PID)
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// View draws the screen.
func (m *Model) View() tea.View {
	lines := make([]string, 0, m.height)
	lines = append(lines, fit(m.width, seg{m.header(), headerStyle}))
	lines = append(lines, m.headings())
	h := m.bodyHeight()
	end := min(len(m.rows), m.offset+h)
	for i := m.offset; i < end; i++ {
		lines = append(lines, m.rowLine(i))
	}
	if len(m.rows) == 0 && m.loaded {
		lines = append(lines, "  (no agents)")
	}
	for len(lines) < headLines+h {
		lines = append(lines, "")
	}
	lines = append(lines, m.noteLine(), fit(m.width, seg{keyHelp, keysStyle}))
	v := tea.NewView(strings.Join(lines, "\n"))
	v.AltScreen = true
	v.WindowTitle = "kin top"
	return v
}

// header is "kin top  home /x  7 agents: 5 active, 2 registered".
func (m *Model) header() string {
	s := "kin top"
	if m.where != "" {
		s += gap + m.where
	}
	if !m.loaded {
		return s + gap + "loading…"
	}
	if m.opt.Root != 0 {
		s += gap + "under #" + m.opt.Root.String()
	}
	counts := map[kin.State]int{}
	for _, a := range m.f.agents {
		counts[a.State]++
	}
	var parts []string
	for _, st := range kin.AllStates {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	s += gap + plural(len(m.f.agents), "agent", "agents")
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

func (m *Model) headings() string {
	c := m.widths
	return fit(m.width, seg{strings.Repeat(" ", len(marker)) + pad("AGENT", c.tree) + gap + pad("ROLE", c.role) + gap +
		pad("STATUS", c.status) + gap + pad("STATE", c.state) + gap + padLeft("PID", c.pid) + gap + c.hostCell("HOST") + "RESPONSIBLE", headingStyle})
}

// rowLine draws row i: the selected one reversed across the screen, the
// others with their state and status coloured.
func (m *Model) rowLine(i int) string {
	r := m.rows[i]
	a := m.f.agents[r.id]
	c := m.widths
	tree, fold := treeCells(r, a)
	segs := []seg{
		{"  ", plainStyle},
		{tree, plainStyle},
		{fold, foldStyle},
		{strings.Repeat(" ", max(0, c.tree-lipgloss.Width(tree+fold))) + gap + pad(orDash(a.Role), c.role) + gap, plainStyle},
		{pad(string(a.Status), c.status), styleOf(statusStyles, a.Status)},
		{gap, plainStyle},
		{pad(string(a.State), c.state), styleOf(stateStyles, a.State)},
		{gap + padLeft(pidCell(a), c.pid) + gap + c.hostCell(orDash(a.Host)) + m.responsible(a), plainStyle},
	}
	if i != m.cursor {
		return fit(m.width, segs...)
	}
	var b strings.Builder
	b.WriteString(marker)
	for _, s := range segs[1:] {
		b.WriteString(s.text)
	}
	return fit(m.width, seg{pad(b.String(), m.width), selectedStyle})
}

// responsible is shown for the tops, and for any agent whose party is not
// its parent's.
func (m *Model) responsible(a *kin.Agent) string {
	p, ok := m.f.agents[a.Parent]
	if !ok || p.Responsible != a.Responsible {
		return a.Responsible
	}
	return ""
}

// noteLine is the question pending, the search being typed, the last note,
// or else a word about the selected agent.
func (m *Model) noteLine() string {
	switch {
	case m.mode == modeConfirm:
		return fit(m.width, seg{m.pending.prompt, promptStyle})
	case m.mode == modeSearch:
		return fit(m.width, seg{"/" + m.input + "█", plainStyle}, seg{"  (enter: find, esc: cancel)", keysStyle})
	case m.note != "" && m.noteErr:
		return fit(m.width, seg{m.note, errorStyle})
	case m.note != "":
		return fit(m.width, seg{m.note, plainStyle})
	}
	a := m.selected()
	if a == nil {
		return ""
	}
	kids := len(m.f.children[a.ID])
	parts := []string{fmt.Sprintf("generation %d", a.Generation), plural(kids, "child", "children")}
	if n := m.f.below[a.ID]; n > kids {
		parts = append(parts, plural(n, "descendant", "descendants")+" in all")
	}
	if a.Life != "" {
		parts = append(parts, string(a.Life))
	}
	if a.EndReason != "" {
		parts = append(parts, "ended: "+a.EndReason)
	}
	return fit(m.width, seg{label(a) + ": " + strings.Join(parts, ", "), keysStyle})
}

// seg is a piece of a line with its style.
type seg struct {
	text  string
	style lipgloss.Style
}

// fit styles segs and cuts them at width cells.
func fit(width int, segs ...seg) string {
	var b strings.Builder
	left := width
	for _, s := range segs {
		if left <= 0 {
			break
		}
		t := s.text
		if w := lipgloss.Width(t); w > left {
			t = ansi.Truncate(t, left, "…")
		}
		left -= lipgloss.Width(t)
		if t != "" {
			b.WriteString(s.style.Render(t))
		}
	}
	return b.String()
}

func pad(s string, w int) string {
	return s + strings.Repeat(" ", max(0, w-lipgloss.Width(s)))
}

func padLeft(s string, w int) string {
	return strings.Repeat(" ", max(0, w-lipgloss.Width(s))) + s
}
