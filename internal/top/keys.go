package top

import (
	tea "charm.land/bubbletea/v2"
)

// keyHelp is the footer's last line.
const keyHelp = "↑↓ move  enter fold  / search  n next  s stop  p/P suspend  r/R resume  q quit  (--help: more)"

// key handles a key press in the current mode.
func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	if k.String() == "ctrl+c" {
		return tea.Quit
	}
	switch m.mode {
	case modeSearch:
		m.searchKey(k)
		return nil
	case modeConfirm:
		return m.confirmKey(k)
	}
	if m.busy == nil {
		m.note = "" // the last message has been seen; keys below may set one
	}
	switch k.String() {
	case "q":
		return tea.Quit
	case "up", "k":
		m.selectRow(m.cursor - 1)
	case "down", "j":
		m.selectRow(m.cursor + 1)
	case "pgup", "ctrl+b":
		m.selectRow(m.cursor - m.bodyHeight())
	case "pgdown", "ctrl+f":
		m.selectRow(m.cursor + m.bodyHeight())
	case "home", "g":
		m.selectRow(0)
	case "end", "G":
		m.selectRow(len(m.rows) - 1)
	case "enter", "space":
		m.fold(!m.collapsed[m.sel])
	case "left", "h":
		m.fold(true)
	case "right", "l":
		m.fold(false)
	case "/":
		m.mode, m.input = modeSearch, ""
	case "n":
		m.search(m.query)
	case "esc":
		m.note = ""
	case "s":
		m.ask(actStop, false)
	case "p":
		m.ask(actSuspend, false)
	case "P":
		m.ask(actSuspend, true)
	case "r":
		m.ask(actResume, false)
	case "R":
		m.ask(actResume, true)
	}
	return nil
}

// fold collapses (or expands) the selected agent's subtree.
func (m *Model) fold(collapse bool) {
	if len(m.f.children[m.sel]) == 0 || m.collapsed[m.sel] == collapse {
		return
	}
	if collapse {
		m.collapsed[m.sel] = true
	} else {
		delete(m.collapsed, m.sel)
	}
	m.rebuild()
}

// searchKey edits the search being typed; enter runs it, esc drops it.
func (m *Model) searchKey(k tea.KeyPressMsg) {
	switch k.String() {
	case "enter":
		m.mode = modeNormal
		if m.input != "" {
			m.query = m.input
		}
		m.search(m.query)
	case "esc":
		m.mode = modeNormal
	case "backspace":
		if r := []rune(m.input); len(r) > 0 {
			m.input = string(r[:len(r)-1])
		}
	default:
		if k.Text != "" {
			m.input += k.Text
		}
	}
}

// search selects the next agent after the selected one whose name
// contains query, expanding its ancestors.
func (m *Model) search(query string) {
	if query == "" {
		m.setNote("type / and a name to search")
		return
	}
	id, ok := m.f.match(query, m.sel)
	if !ok {
		m.note, m.noteErr = "no agent's name contains \""+query+"\"", true
		return
	}
	for _, a := range m.f.ancestors(id) {
		delete(m.collapsed, a)
	}
	m.sel = id
	m.rebuild()
	m.setNote("/%s: #%d %s (n: next)", query, id, m.f.agents[id].Name)
}
