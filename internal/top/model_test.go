package top

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

const seedScreen = `kin top  home /srv/kin  7 agents: 7 registered
  AGENT                       ROLE         STATUS  STATE       PID  RESPONSIBLE
> #1 Research-Coordinator     coordinator  active  registered    -  Dr. Schmidt, COAI Research
  ├── #2 Data-Collector       collector    active  registered    -
  │   ├── #5 Web-Scraper      scraper      active  registered    -
  │   └── #6 API-Fetcher      fetcher      active  registered    -
  ├── #3 Report-Writer        writer       active  registered    -
  │   └── #7 LaTeX-Formatter  formatter    active  registered    -
  └── #4 Peer-Reviewer        reviewer     active  registered    -





#1 Research-Coordinator: generation 0, 3 children, 6 descendants in all, owned
↑↓ move  enter fold  / search  n next  s stop  p/P suspend  r/R resume  q quit  (--help: more)`

func TestTopViewSeedTree(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	if got := h.screen(); got != seedScreen {
		t.Errorf("screen:\n%s\nwant:\n%s", got, seedScreen)
	}
	if n := strings.Count(h.m.View().Content, "\n") + 1; n != 16 {
		t.Errorf("the view has %d lines, want the terminal's 16", n)
	}
}

// TestTopViewFleetHosts: when the agents span hosts of a fleet, a HOST
// column names each one's, as kin ps does; on one host there is none
// (seedScreen).
func TestTopViewFleetHosts(t *testing.T) {
	agents := seedTree()
	for i, a := range agents {
		a.Host = []string{"gpu-1", "b"}[i%2]
	}
	h := start(t, newFake(agents...), Options{}, 110, 16)
	want := []string{
		"  AGENT                       ROLE         STATUS  STATE       PID  HOST   RESPONSIBLE",
		"> #1 Research-Coordinator     coordinator  active  registered    -  gpu-1  Dr. Schmidt, COAI Research",
		"  ├── #2 Data-Collector       collector    active  registered    -  b",
	}
	lines := strings.Split(h.screen(), "\n")
	for i, w := range want {
		if got := strings.TrimRight(lines[i+1], " "); got != w {
			t.Errorf("line %d:\n%q\nwant\n%q", i+1, got, w)
		}
	}
	for _, a := range agents {
		a.Host = "gpu-1"
	}
	if h := start(t, newFake(agents...), Options{}, 100, 16); strings.Contains(h.screen(), "HOST") {
		t.Errorf("one host's agents, a HOST column:\n%s", h.screen())
	}
}

func TestTopViewColoursStates(t *testing.T) {
	agents := seedTree()
	agents[1].State = kin.StateActive
	agents[2].State = kin.StateFailed
	h := start(t, newFake(agents...), Options{}, 100, 16)
	content := h.m.View().Content
	for _, s := range []string{stateStyles[kin.StateActive].Render("active    "), stateStyles[kin.StateFailed].Render("failed    ")} {
		if !strings.Contains(content, s) {
			t.Errorf("the view lacks the styled %q:\n%q", s, content)
		}
	}
}

func TestTopNarrowTerminalCutsLines(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 40, 10)
	for _, l := range strings.Split(h.screen(), "\n") {
		if w := len([]rune(l)); w > 40 {
			t.Errorf("line %q is %d wide on a 40-column terminal", l, w)
		}
	}
	if got := h.line("#1 "); !strings.HasSuffix(got, "…") {
		t.Errorf("a cut line should end with …: %q", got)
	}
}

func TestTopMoveKeys(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	for _, c := range []struct {
		keys []string
		want kin.AgentID
	}{
		{[]string{"down"}, 2},
		{[]string{"j", "j"}, 6},
		{[]string{"k"}, 5},
		{[]string{"up", "up", "up"}, 1}, // stops at the top
		{[]string{"end"}, 4},
		{[]string{"down"}, 4}, // and at the bottom
		{[]string{"home"}, 1},
		{[]string{"pgdown"}, 4},
		{[]string{"pgup"}, 1},
	} {
		h.press(c.keys...)
		if h.m.sel != c.want {
			t.Fatalf("after %v: #%d selected, want #%d", c.keys, h.m.sel, c.want)
		}
		if want := fmt.Sprintf("> %s#%d ", h.m.rows[h.m.cursor].prefix, c.want); !strings.Contains(h.screen(), want) {
			t.Fatalf("after %v: no %q on the screen:\n%s", c.keys, want, h.screen())
		}
	}
}

// bigForest is 1 root, 40 children, 49 grandchildren each: 2,001 agents.
func bigForest() []*kin.Agent {
	agents := []*kin.Agent{{ID: 1, Name: "root", Responsible: "ops", Status: kin.StatusActive, State: kin.StateActive}}
	id := kin.AgentID(2)
	for c := range 40 {
		child := &kin.Agent{ID: id, Parent: 1, Generation: 1, Name: fmt.Sprintf("worker-%02d", c), Responsible: "ops", Status: kin.StatusActive, State: kin.StateActive}
		agents = append(agents, child)
		id++
		for g := range 49 {
			agents = append(agents, &kin.Agent{ID: id, Parent: child.ID, Generation: 2, Name: fmt.Sprintf("task-%02d-%02d", c, g),
				Responsible: "ops", Status: kin.StatusActive, State: kin.StateActive, PID: 1000 + int(id), StartedAt: time.Unix(1, 0)})
			id++
		}
	}
	return agents
}

func TestTopScrollsTwoThousandAgents(t *testing.T) {
	h := start(t, newFake(bigForest()...), Options{}, 100, 20)
	if !strings.HasPrefix(h.screen(), "kin top  home /srv/kin  2001 agents: 2001 active\n") {
		t.Fatalf("header:\n%s", h.screen())
	}
	body := func() []string { // the tree rows on screen
		lines := strings.Split(h.screen(), "\n")
		if len(lines) != 20 {
			t.Fatalf("%d lines on a 20-line terminal", len(lines))
		}
		return lines[2:18]
	}
	h.press("end")
	b := body()
	if !strings.HasPrefix(b[15], "> ") || !strings.Contains(b[15], "#2001 task-39-48") {
		t.Errorf("end: the last row should be the last agent, selected:\n%s", strings.Join(b, "\n"))
	}
	if !strings.Contains(b[0], "#1986 task-39-33") {
		t.Errorf("end: the screen should show the last 16 rows:\n%s", strings.Join(b, "\n"))
	}
	h.press("pgup")
	if h.m.sel != 1985 || !strings.HasPrefix(body()[0], "> ") {
		t.Errorf("pgup: #%d selected, want #1985 at the top:\n%s", h.m.sel, strings.Join(body(), "\n"))
	}
	h.press("home", "down", "enter") // fold worker-00
	if got := body()[1]; !strings.Contains(got, "#2 worker-00 +49") {
		t.Errorf("folded worker-00 should show +49: %q", got)
	}
	if got := body()[2]; !strings.Contains(got, "#52 worker-01") {
		t.Errorf("the row after folded worker-00 should be worker-01: %q", got)
	}
	// Rendering draws only the rows on screen: far fewer than the agents.
	start := time.Now()
	for range 100 {
		h.m.View()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("100 views of 2001 agents took %s", d)
	}
}

func TestTopFold(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	h.press("down", "enter")
	if got := h.line("#2 "); !strings.Contains(got, "#2 Data-Collector +2") {
		t.Errorf("folded: %q", got)
	}
	if strings.Contains(h.screen(), "Web-Scraper") {
		t.Errorf("folded #2's children are still shown:\n%s", h.screen())
	}
	h.press("down") // next row is #3 now
	if h.m.sel != 3 {
		t.Errorf("down from folded #2 selected #%d, want #3", h.m.sel)
	}
	h.press("up", "space")
	if !strings.Contains(h.screen(), "│   ├── #5 Web-Scraper") || strings.Contains(h.screen(), "+2") {
		t.Errorf("unfolded:\n%s", h.screen())
	}
	h.press("down", "enter") // a leaf does not fold
	if strings.Contains(h.screen(), "+") {
		t.Errorf("a leaf folded:\n%s", h.screen())
	}
	h.press("home", "left")
	if got := h.line("#1 "); !strings.Contains(got, "#1 Research-Coordinator +6") {
		t.Errorf("left folds: %q", got)
	}
	h.press("right")
	if !strings.Contains(h.screen(), "#7 LaTeX-Formatter") {
		t.Errorf("right unfolds:\n%s", h.screen())
	}
}

func TestTopSearch(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	h.press("down", "down", "down", "down", "enter") // fold #3 Report-Writer
	if strings.Contains(h.screen(), "LaTeX") {
		t.Fatalf("#3 not folded:\n%s", h.screen())
	}
	h.press("/")
	h.typeText("latexx")
	h.press("backspace")
	if got := h.footer(); !strings.HasPrefix(got, "/latex█") {
		t.Errorf("search prompt: %q", got)
	}
	h.press("enter")
	if h.m.sel != 7 {
		t.Fatalf("search latex selected #%d, want #7", h.m.sel)
	}
	if got := h.line("LaTeX"); !strings.HasPrefix(got, "> │   └── #7 LaTeX-Formatter") {
		t.Errorf("#7 should be shown (its ancestor unfolded) and selected: %q", got)
	}
	// n walks the matches in tree order, wrapping around.
	h.press("/")
	h.typeText("er")
	h.press("enter")
	var got []kin.AgentID
	got = append(got, h.m.sel)
	for range 6 {
		h.press("n")
		got = append(got, h.m.sel)
	}
	want := []kin.AgentID{4, 5, 6, 3, 7, 4, 5} // from #7: Peer-Reviewer, Web-Scraper, API-Fetcher, Report-Writer, LaTeX-Formatter, again
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("er, n, n, ...: %v, want %v", got, want)
	}
	h.press("/")
	h.typeText("nobody")
	h.press("enter")
	if got := h.footer(); got != `no agent's name contains "nobody"` {
		t.Errorf("no match: %q", got)
	}
	h.press("/", "x", "esc")
	if h.m.mode != modeNormal || h.m.query != "nobody" {
		t.Errorf("esc should drop the search being typed: mode %d query %q", h.m.mode, h.m.query)
	}
}

func TestTopStopAsksThenStops(t *testing.T) {
	svc := newFake(seedTree()...)
	h := start(t, svc, Options{}, 100, 16)
	h.press("down", "s")
	if got := h.footer(); got != "Stop #2 Data-Collector and its 2 descendants? y/n" {
		t.Errorf("confirmation: %q", got)
	}
	h.press("n")
	if len(svc.stops) != 0 {
		t.Fatalf("n stopped: %v", svc.stops)
	}
	if got := h.footer(); got != "Stop #2 Data-Collector: not done" {
		t.Errorf("after n: %q", got)
	}
	h.press("s", "y")
	if len(svc.stops) != 1 || svc.stops[0].ID != 2 {
		t.Fatalf("stops: %v", svc.stops)
	}
	if got := h.footer(); got != "Stopped 3 agents: #2 #5 #6" {
		t.Errorf("after y: %q", got)
	}
	for _, name := range []string{"Data-Collector", "Web-Scraper", "API-Fetcher"} {
		if got := h.line(name); !strings.Contains(got, "terminated  cancelled") {
			t.Errorf("%s after stop: %q", name, got)
		}
	}
	if !strings.Contains(h.screen(), "7 agents: 4 registered, 3 cancelled") {
		t.Errorf("header after stop:\n%s", h.screen())
	}
	// Stopping it again is refused without asking.
	h.press("s")
	if h.m.mode != modeNormal || h.footer() != "#2 Data-Collector has already ended (cancelled)" {
		t.Errorf("stop of an ended agent: mode %d, %q", h.m.mode, h.footer())
	}
}

func TestTopStopSparesDetached(t *testing.T) {
	agents := seedTree()
	agents[4].Life = kin.LifeDetached // #5 Web-Scraper
	h := start(t, newFake(agents...), Options{}, 100, 16)
	h.press("down", "s")
	if got := h.footer(); got != "Stop #2 Data-Collector and its 1 descendant? y/n" {
		t.Errorf("confirmation: %q", got)
	}
	h.press("esc")
	h.press("end", "s")
	if got := h.footer(); got != "Stop #4 Peer-Reviewer? y/n" {
		t.Errorf("confirmation of a leaf: %q", got)
	}
}

func TestTopSuspendResume(t *testing.T) {
	svc := newFake(seedTree()...)
	h := start(t, svc, Options{}, 100, 16)
	h.press("down", "p")
	if got := h.footer(); got != "Suspend #2 Data-Collector? y/n" {
		t.Errorf("suspend confirmation: %q", got)
	}
	h.press("y")
	if got := svc.statuses; len(got) != 1 || got[0] != (kin.StatusRequest{ID: 2, Action: kin.ActionSuspend, Reason: "kin top"}) {
		t.Fatalf("SetStatus: %+v", got)
	}
	if got := h.line("Data-Collector"); !strings.Contains(got, "suspended") || h.footer() != "Suspended #2 Data-Collector" {
		t.Errorf("after suspend: %q; footer %q", got, h.footer())
	}
	h.press("p")
	if got := h.footer(); got != "nothing to suspend: #2 Data-Collector is suspended" {
		t.Errorf("suspend again: %q", got)
	}
	h.press("P")
	if got := h.footer(); got != "Suspend 2 descendants of #2 Data-Collector (itself suspended)? y/n" {
		t.Errorf("cascade suspend: %q", got)
	}
	h.press("y")
	if got := h.line("Web-Scraper"); !strings.Contains(got, "suspended") {
		t.Errorf("after cascade: %q", got)
	}
	h.press("R")
	if got := h.footer(); got != "Resume #2 Data-Collector and its 2 descendants? y/n" {
		t.Errorf("cascade resume: %q", got)
	}
	h.press("y")
	if got := svc.statuses[2]; got != (kin.StatusRequest{ID: 2, Action: kin.ActionResume, Cascade: true, Reason: "kin top"}) {
		t.Errorf("SetStatus: %+v", got)
	}
	if strings.Contains(h.screen(), "suspended") || h.footer() != "Resumed 3 agents: #2 #5 #6" {
		t.Errorf("after resume:\n%s", h.screen())
	}
	h.press("r")
	if got := h.footer(); got != "nothing to resume: #2 Data-Collector is active" {
		t.Errorf("resume an active agent: %q", got)
	}
}

func TestTopShowsDaemonErrors(t *testing.T) {
	svc := newFake(seedTree()...)
	svc.err = kin.Errorf(kin.ECodeForbidden, "agent 9 may act only on its descendants")
	h := start(t, svc, Options{}, 100, 16)
	h.press("down", "s", "y")
	if got := h.footer(); got != "Stop #2 Data-Collector failed: agent 9 may act only on its descendants (forbidden)" {
		t.Errorf("footer: %q", got)
	}
	h.press("p", "y")
	if got := h.footer(); !strings.HasPrefix(got, "Suspend #2 Data-Collector failed: ") {
		t.Errorf("footer: %q", got)
	}
	h.press("down") // still usable; moving clears the message
	if h.m.sel != 5 || strings.Contains(h.footer(), "failed") {
		t.Errorf("after the errors: #%d selected, footer %q", h.m.sel, h.footer())
	}
}

func TestTopQuit(t *testing.T) {
	for _, k := range []string{"q", "ctrl+c"} {
		h := start(t, newFake(seedTree()...), Options{}, 100, 16)
		h.press(k)
		if !h.quit {
			t.Errorf("%s did not quit", k)
		}
	}
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	h.press("/", "q")
	if h.quit {
		t.Error("q in a search quit")
	}
	h.press("esc", "s", "ctrl+c")
	if !h.quit {
		t.Error("ctrl+c at a confirmation did not quit")
	}
}

func TestTopRoot(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{Root: 2}, 100, 16)
	want := "kin top  home /srv/kin  under #2  3 agents: 3 registered\n" +
		"  AGENT               ROLE       STATUS  STATE       PID  RESPONSIBLE\n" +
		"> #2 Data-Collector   collector  active  registered    -  Dr. Schmidt, COAI Research\n" +
		"  ├── #5 Web-Scraper  scraper    active  registered    -\n" +
		"  └── #6 API-Fetcher  fetcher    active  registered    -\n"
	if got := h.screen(); !strings.HasPrefix(got, want) {
		t.Errorf("screen:\n%s\nwant it to start with:\n%s", got, want)
	}
	h = start(t, newFake(seedTree()...), Options{Root: 99}, 100, 16)
	if got := h.footer(); got != "agent 99 not found" {
		t.Errorf("unknown root: %q", got)
	}
}

// TestTopFollowsEvents runs the live commands by hand: follow from the
// last event before the load, and one reload for a burst of events.
func TestTopFollowsEvents(t *testing.T) {
	svc := newFake(seedTree()...)
	h := start(t, svc, Options{}, 100, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.m.ctx = ctx
	followed := make(chan any, 1)
	go func() { followed <- h.m.follow() }()
	svc.add(&kin.Agent{ID: 8, Parent: 4, Generation: 2, Name: "Citation-Checker", Responsible: "Dr. Schmidt, COAI Research",
		Status: kin.StatusActive, State: kin.StateRegistered})
	loadsBefore := svc.loads
	for seq := int64(42); seq < 52; seq++ { // a burst of ten events
		svc.events <- kin.Event{Seq: seq, Type: kin.EventAgentRegistered}
		<-svc.delivered
	}
	msg := h.m.waitChange()
	if _, cmd := h.m.Update(msg); cmd == nil {
		t.Error("after a reload from the feed, no command waits for the next change")
	} // (not run: it would wait for more events)
	if got := h.line("Citation-Checker"); got != "      └── #8 Citation-Checker  -            active  registered    -" {
		t.Errorf("new agent: %q", got)
	}
	if n := svc.loads - loadsBefore; n != 1 {
		t.Errorf("%d loads for a burst of events, want 1", n)
	}
	select {
	case <-h.m.feed.changed:
		t.Error("a change is still pending after the reload that covered it")
	default:
	}
	if got := svc.follows[0].Since; got != 41 {
		t.Errorf("followed since %d, want the last event before the load, 41", got)
	}
	if got := h.m.feed.seq.Load(); got != 51 {
		t.Errorf("last seq seen %d, want 51", got)
	}
	cancel()
	if msg := <-followed; msg != nil {
		t.Errorf("follow ended with %v when its context ended, want nothing", msg)
	}
}

func TestTopReconnectsAfterStreamBreaks(t *testing.T) {
	h := start(t, newFake(seedTree()...), Options{}, 100, 16)
	_, cmd := h.m.Update(followEndedMsg{err: kin.Errorf(kin.ECodeUnavailable, "the event stream from socket x broke: EOF")})
	if cmd == nil {
		t.Error("no reconnection scheduled")
	}
	if got := h.footer(); got != "live updates interrupted, reconnecting: the event stream from socket x broke: EOF (unavailable)" {
		t.Errorf("footer: %q", got)
	}
}
