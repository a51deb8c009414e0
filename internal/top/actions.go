package top

import (
	"fmt"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/kin-agents/kin/kin"
)

// actionKind is what an action does to the selected agent.
type actionKind string

const (
	actStop    actionKind = "stop"    // Service.Stop: the agent and its owned subtree
	actSuspend actionKind = "suspend" // Service.SetStatus suspend
	actResume  actionKind = "resume"  // Service.SetStatus resume
)

// verbs: the prompt's verb, the running note's and the outcome's.
var verbs = map[actionKind][3]string{
	actStop:    {"Stop", "Stopping", "Stopped"},
	actSuspend: {"Suspend", "Suspending", "Suspended"},
	actResume:  {"Resume", "Resuming", "Resumed"},
}

// action is an action on one agent, as confirmed.
type action struct {
	kind    actionKind
	agent   kin.Agent
	cascade bool
	prompt  string
}

// reason is the reason kin top gives the daemon for status changes.
const reason = "kin top"

// ask prepares kind on the selected agent and asks for confirmation,
// naming everything it affects; if it would affect nothing it says why.
func (m *Model) ask(kind actionKind, cascade bool) {
	a := m.selected()
	if a == nil {
		return
	}
	if m.busy != nil {
		m.note, m.noteErr = fmt.Sprintf("%s: wait until it is done", m.busyNote()), true
		return
	}
	verb := verbs[kind][0]
	var self bool // the action applies to a itself
	n := 0        // to how many descendants
	switch kind {
	case actStop:
		// Service.Stop always takes the owned subtree; it refuses an
		// agent that has ended.
		if a.State.Terminal() {
			m.note, m.noteErr = fmt.Sprintf("%s has already ended (%s)", label(a), a.State), true
			return
		}
		self, cascade = true, true
		m.f.descendants(a.ID, true, func(d *kin.Agent) {
			if !d.State.Terminal() {
				n++
			}
		})
	default:
		act := kin.StatusAction(kind)
		_, self = act.Transition(a.Status)
		if cascade {
			m.f.descendants(a.ID, false, func(d *kin.Agent) {
				if _, ok := act.Transition(d.Status); ok {
					n++
				}
			})
		}
		if !self && n == 0 {
			what := label(a)
			if cascade {
				what += " and its descendants"
			}
			m.note, m.noteErr = fmt.Sprintf("nothing to %s: %s is %s", kind, what, statusWord(a, cascade)), true
			return
		}
	}
	var prompt string
	switch {
	case self && n == 0:
		prompt = fmt.Sprintf("%s %s?", verb, label(a))
	case self:
		prompt = fmt.Sprintf("%s %s and its %s?", verb, label(a), plural(n, "descendant", "descendants"))
	default:
		prompt = fmt.Sprintf("%s %s of %s (itself %s)?", verb, plural(n, "descendant", "descendants"), label(a), a.Status)
	}
	m.pending = &action{kind: kind, agent: *a, cascade: cascade, prompt: prompt + " y/n"}
	m.mode = modeConfirm
}

// statusWord says why a status change applies to none: the agent's status,
// or that its subtree's statuses all rule it out.
func statusWord(a *kin.Agent, cascade bool) string {
	if cascade {
		return "not in a status it applies to"
	}
	return string(a.Status)
}

// confirmKey answers the pending question: y runs the action, anything
// else drops it.
func (m *Model) confirmKey(k tea.KeyPressMsg) tea.Cmd {
	act := m.pending
	m.pending, m.mode = nil, modeNormal
	if s := k.String(); s != "y" && s != "Y" {
		m.setNote("%s: not done", verbs[act.kind][0]+" "+label(&act.agent))
		return nil
	}
	m.busy = act
	m.setNote("%s…", m.busyNote())
	return m.run(*act)
}

func (m *Model) busyNote() string {
	return verbs[m.busy.kind][1] + " " + label(&m.busy.agent)
}

// run calls the service for act.
func (m *Model) run(act action) tea.Cmd {
	return func() tea.Msg {
		var changed []*kin.Agent
		var err error
		switch act.kind {
		case actStop:
			changed, err = m.svc.Stop(m.ctx, kin.StopRequest{ID: act.agent.ID})
		default:
			changed, err = m.svc.SetStatus(m.ctx, kin.StatusRequest{
				ID: act.agent.ID, Action: kin.StatusAction(act.kind), Cascade: act.cascade, Reason: reason,
			})
		}
		return actionDoneMsg{act: act, changed: changed, err: err}
	}
}

// actionDone reports an action's outcome and reloads: the event stream
// would too, but without it (or before it) the screen is current at once.
func (m *Model) actionDone(msg actionDoneMsg) tea.Cmd {
	m.busy = nil
	verb := verbs[msg.act.kind]
	if msg.err != nil {
		m.fail(fmt.Sprintf("%s %s failed", verb[0], label(&msg.act.agent)), msg.err)
		return m.reload
	}
	ids := make([]string, len(msg.changed))
	for i, a := range msg.changed {
		ids[i] = "#" + a.ID.String()
	}
	switch len(msg.changed) {
	case 0:
		m.setNote("%s nothing", verb[2])
	case 1:
		m.setNote("%s %s", verb[2], label(msg.changed[0]))
	default:
		m.setNote("%s %s: %s", verb[2], plural(len(msg.changed), "agent", "agents"), strings.Join(ids, " "))
	}
	return m.reload
}

// label names an agent as the footer does: "#2 Data-Collector".
func label(a *kin.Agent) string { return fmt.Sprintf("#%d %s", a.ID, a.Name) }

// plural is "1 agent", "2 agents".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
