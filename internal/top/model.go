package top

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/kin-agents/kin/kin"
)

// Options configure a Model.
type Options struct {
	// Root shows only this agent's subtree (0: every tree).
	Root kin.AgentID
	// Where names the daemon in the header (e.g. its socket or address);
	// "" shows the daemon's home as its Status reports it.
	Where string
	// Live follows the event stream and reloads on every change. Tests
	// that drive Update alone leave it off.
	Live bool
}

// mode is what keys do now.
type mode int

const (
	modeNormal  mode = iota
	modeSearch       // typing a search
	modeConfirm      // an action waits for y/n
)

// Model is kin top's state. Its commands talk to the service; Update
// and View never block.
type Model struct {
	ctx  context.Context
	svc  kin.Service
	opt  Options
	feed *feed

	where  string
	loaded bool
	f      *forest
	rows   []row
	widths columns

	collapsed map[kin.AgentID]bool
	sel       kin.AgentID // the selected agent (kept across reloads)
	cursor    int         // its index in rows
	offset    int         // the first row on screen

	width, height int

	mode    mode
	input   string  // the search being typed
	query   string  // the last search, for n
	pending *action // what modeConfirm asks about
	busy    *action // the action running now
	note    string  // the footer's message
	noteErr bool    // the note is an error
}

// New returns the model of kin top on svc. ctx bounds every call to the
// service and the event stream: cancel it when the program ends.
func New(ctx context.Context, svc kin.Service, opt Options) *Model {
	return &Model{
		ctx:       ctx,
		svc:       svc,
		opt:       opt,
		feed:      newFeed(),
		where:     opt.Where,
		f:         newForest(nil, opt.Root),
		collapsed: map[kin.AgentID]bool{},
		width:     80,
		height:    24,
	}
}

// Messages from the model's commands.
type (
	// loadedMsg is the agents, loaded; status is set on the first load.
	loadedMsg struct {
		agents   []*kin.Agent
		status   *kin.DaemonStatus
		err      error
		fromFeed bool // loaded because of events: wait for the next ones
	}
	// followEndedMsg says the event stream broke.
	followEndedMsg struct{ err error }
	// refollowMsg says it is time to follow the event stream again.
	refollowMsg struct{}
	// actionDoneMsg is an action's outcome.
	actionDoneMsg struct {
		act     action
		changed []*kin.Agent
		err     error
	}
)

// Init loads the agents; the event stream is followed once they are in.
func (m *Model) Init() tea.Cmd { return m.firstLoad }

// firstLoad notes the last event before loading the agents, so that
// following from it misses nothing.
func (m *Model) firstLoad() tea.Msg {
	st, err := m.svc.Status(m.ctx)
	if err != nil {
		st = nil // the header then lacks the home; the feed starts at 0
	}
	msg := m.load()
	msg.status = st
	if msg.err == nil && err != nil && m.where == "" {
		msg.err = err
	}
	return msg
}

// load loads the agents.
func (m *Model) load() loadedMsg {
	agents, err := m.svc.Agents(m.ctx, kin.AgentFilter{})
	return loadedMsg{agents: agents, err: err}
}

// reload is load as a command.
func (m *Model) reload() tea.Msg { return m.load() }

// Update applies msg.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scroll()
	case loadedMsg:
		return m, m.loaded1(msg)
	case followEndedMsg:
		m.fail("live updates interrupted, reconnecting", msg.err)
		return m, tea.Tick(2*time.Second, func(time.Time) tea.Msg { return refollowMsg{} })
	case refollowMsg:
		return m, tea.Batch(m.follow, m.reload)
	case actionDoneMsg:
		return m, m.actionDone(msg)
	case tea.KeyPressMsg:
		return m, m.key(msg)
	}
	return m, nil
}

// loaded1 takes in a load.
func (m *Model) loaded1(msg loadedMsg) tea.Cmd {
	first := !m.loaded
	var cmds []tea.Cmd
	if msg.fromFeed {
		cmds = append(cmds, m.waitChange)
	}
	if msg.status != nil {
		if m.where == "" {
			m.where = "home " + msg.status.Home
		}
		m.feed.seq.Store(msg.status.LastEvent)
	}
	if msg.err != nil {
		m.fail("cannot load the agents", msg.err)
		return tea.Batch(cmds...)
	}
	m.loaded = true
	if first && m.opt.Live {
		cmds = append(cmds, m.follow, m.waitChange)
	}
	m.f = newForest(msg.agents, m.opt.Root)
	if first && m.opt.Root != 0 && len(m.f.tops) == 0 {
		m.note, m.noteErr = fmt.Sprintf("agent %d not found", m.opt.Root), true
	}
	m.rebuild()
	return tea.Batch(cmds...)
}

// rebuild recomputes the rows after the forest or a fold changed, keeping
// the selection on the same agent (or on its nearest shown ancestor).
func (m *Model) rebuild() {
	m.rows = m.f.rows(m.collapsed)
	m.widths = m.measure()
	if len(m.rows) == 0 {
		m.sel, m.cursor, m.offset = 0, 0, 0
		return
	}
	i := m.rowOf(m.sel)
	if i < 0 {
		for _, a := range m.f.ancestors(m.sel) {
			if i = m.rowOf(a); i >= 0 {
				break
			}
		}
	}
	if i < 0 {
		i = min(m.cursor, len(m.rows)-1)
	}
	m.selectRow(i)
}

// rowOf returns the index of id's row, or -1 if it is not shown.
func (m *Model) rowOf(id kin.AgentID) int {
	if id == 0 {
		return -1
	}
	return slices.IndexFunc(m.rows, func(r row) bool { return r.id == id })
}

// selectRow selects row i (clamped) and scrolls it into view.
func (m *Model) selectRow(i int) {
	if len(m.rows) == 0 {
		return
	}
	i = max(0, min(i, len(m.rows)-1))
	m.cursor, m.sel = i, m.rows[i].id
	m.scroll()
}

// scroll moves the window so that the selected row is on screen.
func (m *Model) scroll() {
	h := m.bodyHeight()
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+h {
		m.offset = m.cursor - h + 1
	}
	m.offset = max(0, min(m.offset, len(m.rows)-h))
}

// selected returns the selected agent, or nil.
func (m *Model) selected() *kin.Agent {
	return m.f.agents[m.sel]
}

func (m *Model) setNote(format string, args ...any) {
	m.note, m.noteErr = fmt.Sprintf(format, args...), false
}

// fail shows what failed in the footer: what, then err.
func (m *Model) fail(what string, err error) {
	m.note, m.noteErr = what+": "+describe(err), true
}

// describe is err as the footer says it: the service's errors as the CLI
// prints them, "message (code)".
func describe(err error) string {
	var ke *kin.Error
	if errors.As(err, &ke) {
		return fmt.Sprintf("%s (%s)", ke.Message, ke.Code)
	}
	return err.Error()
}
