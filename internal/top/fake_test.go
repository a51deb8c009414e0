package top

import (
	"context"
	"strings"
	"sync"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/kin-agents/kin/kin"
)

// fakeService is a kin.Service holding a list of agents: Stop and SetStatus
// change them as the daemon would (simply), and FollowEvents delivers what
// the test emits. Methods kin top does not use panic (the embedded
// interface is nil).
type fakeService struct {
	kin.Service

	mu       sync.Mutex
	agents   []*kin.Agent
	lastSeq  int64
	err      error // when set, Stop and SetStatus answer it
	loads    int   // calls of Agents
	stops    []kin.StopRequest
	statuses []kin.StatusRequest
	follows  []kin.EventFilter

	events    chan kin.Event // what FollowEvents delivers
	delivered chan int64     // the seq of each event delivered
}

func newFake(agents ...*kin.Agent) *fakeService {
	return &fakeService{agents: agents, lastSeq: 41, events: make(chan kin.Event), delivered: make(chan int64)}
}

func (f *fakeService) Status(context.Context) (*kin.DaemonStatus, error) {
	return &kin.DaemonStatus{Home: "/srv/kin", LastEvent: f.lastSeq}, nil
}

func (f *fakeService) Agents(_ context.Context, flt kin.AgentFilter) ([]*kin.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	out := make([]*kin.Agent, len(f.agents))
	for i, a := range f.agents {
		c := *a
		out[i] = &c
	}
	return out, nil
}

// add registers another agent.
func (f *fakeService) add(a *kin.Agent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents = append(f.agents, a)
}

func (f *fakeService) find(id kin.AgentID) *kin.Agent {
	for _, a := range f.agents {
		if a.ID == id {
			return a
		}
	}
	return nil
}

// subtree returns id and its descendants, skipping detached ones with owned.
func (f *fakeService) subtree(id kin.AgentID, owned bool) []*kin.Agent {
	out := []*kin.Agent{f.find(id)}
	for _, a := range f.agents {
		if a.Parent == id && !(owned && a.Life == kin.LifeDetached) {
			out = append(out, f.subtree(a.ID, owned)...)
		}
	}
	return out
}

func (f *fakeService) Stop(_ context.Context, req kin.StopRequest) ([]*kin.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops = append(f.stops, req)
	if f.err != nil {
		return nil, f.err
	}
	var out []*kin.Agent
	for _, a := range f.subtree(req.ID, true) {
		if !a.State.Terminal() {
			a.State, a.Status, a.EndReason = kin.StateCancelled, kin.StatusTerminated, "stopped"
			c := *a
			out = append(out, &c)
		}
	}
	return out, nil
}

func (f *fakeService) SetStatus(_ context.Context, req kin.StatusRequest) ([]*kin.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses = append(f.statuses, req)
	if f.err != nil {
		return nil, f.err
	}
	targets := []*kin.Agent{f.find(req.ID)}
	if req.Cascade {
		targets = f.subtree(req.ID, false)
	}
	var out []*kin.Agent
	for _, a := range targets {
		if to, ok := req.Action.Transition(a.Status); ok {
			a.Status = to
			c := *a
			out = append(out, &c)
		}
	}
	if len(out) == 0 {
		return nil, kin.Errorf(kin.ECodeInvalidTransition, "cannot %s agent %d", req.Action, req.ID)
	}
	return out, nil
}

func (f *fakeService) FollowEvents(ctx context.Context, flt kin.EventFilter, fn func(kin.Event) error) error {
	f.mu.Lock()
	f.follows = append(f.follows, flt)
	f.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-f.events:
			if err := fn(e); err != nil {
				return err
			}
			f.delivered <- e.Seq
		}
	}
}

// seedTree is seed 000's example tree, as README.md's walk-through
// registers it.
func seedTree() []*kin.Agent {
	agent := func(id, parent kin.AgentID, gen int, name, role string) *kin.Agent {
		return &kin.Agent{ID: id, Parent: parent, Generation: gen, Name: name, Role: role,
			Responsible: "Dr. Schmidt, COAI Research", Life: kin.LifeOwned,
			Status: kin.StatusActive, State: kin.StateRegistered, CreatedBy: kin.Operator}
	}
	return []*kin.Agent{
		agent(1, 0, 0, "Research-Coordinator", "coordinator"),
		agent(2, 1, 1, "Data-Collector", "collector"),
		agent(3, 1, 1, "Report-Writer", "writer"),
		agent(4, 1, 1, "Peer-Reviewer", "reviewer"),
		agent(5, 2, 2, "Web-Scraper", "scraper"),
		agent(6, 2, 2, "API-Fetcher", "fetcher"),
		agent(7, 3, 2, "LaTeX-Formatter", "formatter"),
	}
}

// harness drives a Model as the program would, but synchronously: each
// command runs at once and its message goes to Update. It runs only
// commands that return promptly: Options.Live stays off.
type harness struct {
	t    *testing.T
	m    *Model
	quit bool
}

func start(t *testing.T, svc kin.Service, opt Options, width, height int) *harness {
	t.Helper()
	if opt.Live {
		t.Fatal("the harness cannot run the live commands: they block")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{t: t, m: New(ctx, svc, opt)}
	h.send(tea.WindowSizeMsg{Width: width, Height: height})
	h.do(h.m.Init())
	return h
}

func (h *harness) send(msg tea.Msg) {
	_, cmd := h.m.Update(msg)
	h.do(cmd)
}

func (h *harness) do(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			h.do(c)
		}
	case tea.QuitMsg:
		h.quit = true
	default:
		h.send(msg)
	}
}

// press sends keys by name: "up", "enter", "ctrl+c", or one character.
func (h *harness) press(keys ...string) {
	for _, k := range keys {
		h.send(keyMsg(k))
	}
}

// typeText sends each character of s as a key.
func (h *harness) typeText(s string) {
	for _, r := range s {
		h.send(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
}

var namedKeys = map[string]tea.KeyPressMsg{
	"up":        {Code: tea.KeyUp},
	"down":      {Code: tea.KeyDown},
	"pgup":      {Code: tea.KeyPgUp},
	"pgdown":    {Code: tea.KeyPgDown},
	"home":      {Code: tea.KeyHome},
	"end":       {Code: tea.KeyEnd},
	"enter":     {Code: tea.KeyEnter},
	"space":     {Code: tea.KeySpace, Text: " "},
	"esc":       {Code: tea.KeyEscape},
	"backspace": {Code: tea.KeyBackspace},
	"left":      {Code: tea.KeyLeft},
	"right":     {Code: tea.KeyRight},
	"ctrl+c":    {Code: 'c', Mod: tea.ModCtrl},
}

func keyMsg(name string) tea.KeyPressMsg {
	if k, ok := namedKeys[name]; ok {
		return k
	}
	r := []rune(name)
	if len(r) != 1 {
		panic("unknown key " + name)
	}
	return tea.KeyPressMsg{Code: r[0], Text: name}
}

// screen is the view as plain text, without trailing blanks.
func (h *harness) screen() string {
	return plainScreen(h.m.View().Content)
}

func plainScreen(s string) string {
	lines := strings.Split(ansi.Strip(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// line returns the screen's line that contains s, or fails.
func (h *harness) line(s string) string {
	h.t.Helper()
	for _, l := range strings.Split(h.screen(), "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	h.t.Fatalf("no line with %q on the screen:\n%s", s, h.screen())
	return ""
}

// footer returns the note line (the last line but one).
func (h *harness) footer() string {
	lines := strings.Split(h.screen(), "\n")
	return lines[len(lines)-2]
}
