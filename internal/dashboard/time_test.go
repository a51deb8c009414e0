package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// The browser tests of time and load (issue 19): how agents ended, when
// they ran, what they use now, their URLs, the event history and the log.

// spawnSh spawns "sh -c script" as an agent (a root of Dr. Schmidt's when
// parent is 0).
func spawnSh(t *testing.T, d *kintest.Daemon, name string, parent kin.AgentID, script string) *kin.Agent {
	t.Helper()
	req := kin.SpawnRequest{Command: []string{"/bin/sh", "-c", script}}
	req.Name, req.Parent = name, parent
	if parent == 0 {
		req.Responsible = "Dr. Schmidt, COAI Research"
	}
	a, err := d.Client.Spawn(context.Background(), req)
	if err != nil {
		t.Fatalf("spawn %s: %v", name, err)
	}
	return a
}

// waitEnded waits for the agent to reach a terminal state and returns it.
func waitEnded(t *testing.T, d *kintest.Daemon, id kin.AgentID) *kin.Agent {
	t.Helper()
	var a *kin.Agent
	kintest.WaitFor(t, 20*time.Second, fmt.Sprintf("agent %d ended", id), func() bool {
		var err error
		a, err = d.Client.Agent(context.Background(), id)
		return err == nil && a.State.Terminal()
	})
	return a
}

func stop(t *testing.T, d *kintest.Daemon, id kin.AgentID) {
	t.Helper()
	if _, err := d.Client.Stop(context.Background(), kin.StopRequest{ID: id}); err != nil {
		t.Fatalf("stop %d: %v", id, err)
	}
}

// viewport sets the page's width (height 800) and waits for the tree to
// be fitted again.
func viewport(t *testing.T, ctx context.Context, width int64) {
	t.Helper()
	do(t, ctx, fmt.Sprintf("a %d px wide window", width), chromedp.EmulateViewport(width, 800))
	waitJS(t, ctx, "the layout at the new width", fmt.Sprintf(`window.innerWidth === %d`, width))
	do(t, ctx, "fit", click("#fit"))
}

func nodeSel(id kin.AgentID) string { return fmt.Sprintf(`#graph .node[data-id="%d"]`, id) }

// Completed, failed and cancelled agents differ in fill colour and in
// outline shape, the legend explains them, an ended agent's panel shows no
// pid and allows no promotion, and the page fits 1280 and 800 px.
func TestDashboardOutcomes(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	root := spawnSh(t, d, "Coordinator", 0, "exec sleep 3600")
	done := spawnSh(t, d, "Completes", root.ID, "exit 0")
	bad := spawnSh(t, d, "Fails", root.ID, "exit 3")
	gone := spawnSh(t, d, "Cancelled", root.ID, "exec sleep 3600")
	spawnSh(t, d, "Still-Running", root.ID, "exec sleep 3600")
	stop(t, d, gone.ID)
	for _, id := range []kin.AgentID{done.ID, bad.ID, gone.ID} {
		waitEnded(t, d, id)
	}
	login(t, ctx, "http://"+d.HTTPAddr(), d.OperatorToken())
	want := map[kin.AgentID]string{done.ID: "completed", bad.ID: "failed", gone.ID: "cancelled", root.ID: ""}
	for id, oc := range want {
		waitJS(t, ctx, fmt.Sprintf("agent %d drawn %q", id, oc), fmt.Sprintf(`(document.querySelector('%s') || {dataset: {}}).dataset.outcome === %q`, nodeSel(id), oc))
	}
	type look struct{ Fill, Stroke, Dash string }
	looks := map[string]look{}
	for id, oc := range want {
		looks[oc] = eval[look](t, ctx, fmt.Sprintf(`(s => ({fill: s.fill, stroke: s.stroke, dash: s.strokeDasharray}))(getComputedStyle(document.querySelector('%s > rect')))`, nodeSel(id)))
	}
	for _, a := range []string{"completed", "failed", "cancelled", ""} {
		for _, b := range []string{"completed", "failed", "cancelled", ""} {
			if a < b && (looks[a].Fill == looks[b].Fill || (looks[a].Dash == looks[b].Dash && a != "" && b != "")) {
				t.Errorf("%q and %q agents look alike: %+v and %+v", a, b, looks[a], looks[b])
			}
		}
	}
	legend := eval[[]string](t, ctx, `[...document.querySelectorAll('#legend .key[data-outcome]')].map(k => k.dataset.outcome + ' ' + getComputedStyle(k.querySelector('i')).borderStyle)`)
	if strings.Join(legend, ",") != "completed solid,failed dashed,cancelled dotted" {
		t.Errorf("the legend's outcomes: %q", legend)
	}

	// The fold button sits below the node, clear of its text.
	gap := eval[float64](t, ctx, fmt.Sprintf(`(() => { const n = document.querySelector('%s'); return n.querySelector('.toggle rect').getBoundingClientRect().top - n.querySelector(':scope > rect').getBoundingClientRect().bottom })()`, nodeSel(root.ID)))
	if gap < 0 {
		t.Errorf("the fold button overlaps its node by %.1f px", -gap)
	}
	// The search box is wide enough for its placeholder.
	if room := eval[float64](t, ctx, `(() => { const i = document.querySelector('#search'), s = getComputedStyle(i), c = document.createElement('canvas').getContext('2d'); c.font = s.font; return i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight) - c.measureText(i.placeholder).width })()`); room < 0 {
		t.Errorf("the search placeholder is cut off by %.1f px", -room)
	}

	// An ended agent's panel: how long it ran and how, no pid, no promotion.
	do(t, ctx, "select the failed agent", click(nodeSel(bad.ID)+" rect"))
	waitJS(t, ctx, "its panel", fmt.Sprintf(`(document.querySelector('#panel h2') || {}).textContent?.startsWith("#%d ")`, bad.ID))
	facts := eval[string](t, ctx, `document.querySelector('#facts').textContent`)
	if strings.Contains(facts, "pid") || !strings.Contains(facts, "duration") || !strings.Contains(facts, "exit 3") {
		t.Errorf("the ended agent's facts read %q: want a duration and exit 3, no pid", facts)
	}
	if !eval[bool](t, ctx, `document.querySelector('#panel button[data-act="promote"]').disabled && document.querySelector('#stage').disabled`) {
		t.Error("an ended agent's panel allows Promote")
	}

	for _, w := range []int64{1280, 800} {
		viewport(t, ctx, w)
		// Fitted, every node is inside the tree's pane, clear of the panel.
		clipped := eval[[]string](t, ctx, `(() => { const g = document.querySelector('#graph').getBoundingClientRect(), p = document.querySelector('#panel').getBoundingClientRect(); return [...document.querySelectorAll('#graph .node')].filter(n => { const r = n.getBoundingClientRect(); return r.left < g.left - 1 || r.right > g.right + 1 || r.top < g.top - 1 || r.bottom > g.bottom + 1 || (r.right > p.left && r.left < p.right && r.bottom > p.top && r.top < p.bottom && p.width > 0 && getComputedStyle(document.querySelector('#panel')).position !== 'absolute') }).map(n => n.dataset.id) })()`)
		if len(clipped) > 0 {
			t.Errorf("at %d px the tree clips agents %v", w, clipped)
		}
		if sw := eval[int](t, ctx, `document.documentElement.scrollWidth`); sw > int(w) {
			t.Errorf("at %d px the page is %d px wide", w, sw)
		}
		screenshot(t, ctx, fmt.Sprintf("20-outcomes-%d.png", w))
	}
}

// The timeline of a three-generation tree: one bar per agent, each under
// its parent and indented one step further, starting where the agent
// started and ending where it ended (now, for the running).
func TestDashboardTimeline(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	root := spawnSh(t, d, "Coordinator", 0, "exec sleep 3600")
	mid := spawnSh(t, d, "Collector", root.ID, "exec sleep 3600")
	quick := spawnSh(t, d, "Quick", mid.ID, "exit 0")
	leaf := spawnSh(t, d, "Scraper", mid.ID, "exec sleep 3600")
	other := spawnSh(t, d, "Writer", root.ID, "exit 4")
	waitEnded(t, d, quick.ID)
	waitEnded(t, d, other.ID)
	stop(t, d, mid.ID) // ends mid and leaf
	ended := map[kin.AgentID]*kin.Agent{}
	for _, id := range []kin.AgentID{mid.ID, quick.ID, leaf.ID, other.ID} {
		ended[id] = waitEnded(t, d, id)
	}
	base := "http://" + d.HTTPAddr()
	login(t, ctx, base, d.OperatorToken())
	do(t, ctx, "open the timeline", chromedp.Navigate(fmt.Sprintf("%s/#/timeline/%d", base, root.ID)))
	waitJS(t, ctx, "five bars", `document.querySelectorAll('#timeline .tl-bar[data-end]').length === 5`)
	if shown := eval[string](t, ctx, `getComputedStyle(document.querySelector('#graph')).display`); shown != "none" {
		t.Errorf("the tree is still drawn (display %s) under the timeline", shown)
	}
	type row struct {
		ID                        kin.AgentID
		Depth                     int
		Indent, Left, Right       float64
		Start, End                float64
		WantLeft, WantRight, Span float64
		MinWidth                  float64
		Outcome                   string
	}
	// One evaluation, so that the clock cannot move the bars between reads.
	readBars := `(() => { const ax = document.querySelector('#tl-axis'), t0 = +ax.dataset.t0, t1 = +ax.dataset.t1;
		return [...document.querySelectorAll('#timeline .tl-row')].map(r => { const b = r.querySelector('.tl-bar'), tr = r.querySelector('.tl-track').getBoundingClientRect(), br = b.getBoundingClientRect(), cs = getComputedStyle(b);
			return {id: +r.dataset.id, depth: +r.dataset.depth, indent: parseFloat(getComputedStyle(r.firstChild).paddingLeft), left: br.left, right: br.right, start: +b.dataset.start, end: +b.dataset.end,
				wantLeft: tr.left + (b.dataset.start - t0) / (t1 - t0) * tr.width, wantRight: tr.left + (b.dataset.end - t0) / (t1 - t0) * tr.width, span: tr.width, outcome: b.dataset.outcome,
				minWidth: parseFloat(cs.paddingLeft) + parseFloat(cs.paddingRight) + parseFloat(cs.borderLeftWidth) + parseFloat(cs.borderRightWidth)} }) })()`
	// Each bar where its start and end put it on the axis: a running
	// agent's bar ends at the page's clock, which it moves on its own
	// ticks, and under a loaded CI a tick may land between the bars' style
	// and the axis's data (a few pixels apart, for any bar), so the bars
	// are read again until they agree, for at most 3 s.
	misplaced := func(rows []row) []string {
		var bad []string
		for _, r := range rows {
			slack := 2.0
			if _, done := ended[r.ID]; !done {
				slack = 5
			}
			// A bar is never narrower than its padding and borders: a
			// short life on a long axis (a loaded machine's run) is
			// drawn that wide, from its start.
			if r.MinWidth <= 0 {
				bad = append(bad, fmt.Sprintf("agent %d's bar: its padding and borders read as %.1f px", r.ID, r.MinWidth))
			}
			wantRight := max(r.WantRight, r.WantLeft+r.MinWidth)
			if abs(r.Left-r.WantLeft) > 2 || abs(r.Right-wantRight) > slack {
				bad = append(bad, fmt.Sprintf("agent %d's bar spans %.1f-%.1f px, want %.1f-%.1f", r.ID, r.Left, r.Right, r.WantLeft, wantRight))
			}
		}
		return bad
	}
	rows := eval[[]row](t, ctx, readBars)
	for deadline := time.Now().Add(3 * time.Second); len(misplaced(rows)) > 0 && time.Now().Before(deadline); {
		rows = eval[[]row](t, ctx, readBars)
	}
	for _, m := range misplaced(rows) {
		t.Error(m)
	}
	order := []kin.AgentID{root.ID, mid.ID, quick.ID, leaf.ID, other.ID}
	depth := []int{0, 1, 2, 2, 1}
	parent := map[kin.AgentID]kin.AgentID{mid.ID: root.ID, quick.ID: mid.ID, leaf.ID: mid.ID, other.ID: root.ID}
	if len(rows) != len(order) {
		t.Fatalf("the timeline has %d rows, want %d: %+v", len(rows), len(order), rows)
	}
	byID := map[kin.AgentID]row{}
	for i, r := range rows {
		byID[r.ID] = r
		if r.ID != order[i] || r.Depth != depth[i] {
			t.Errorf("row %d is agent %d at depth %d, want %d at depth %d", i, r.ID, r.Depth, order[i], depth[i])
		}
		if i > 0 && r.Depth > rows[i-1].Depth && r.Indent <= rows[i-1].Indent {
			t.Errorf("agent %d is not indented under its parent (%.0f px, parent %.0f px)", r.ID, r.Indent, rows[i-1].Indent)
		}
	}
	for id, a := range ended {
		r := byID[id]
		if want := float64(a.EndedAt.UnixMilli()); r.End != want {
			t.Errorf("agent %d's bar ends at %v, it ended at %v", id, time.UnixMilli(int64(r.End)), a.EndedAt)
		}
		if want := float64(a.StartedAt.UnixMilli()); r.Start != want {
			t.Errorf("agent %d's bar starts at %v, it started at %v", id, time.UnixMilli(int64(r.Start)), a.StartedAt)
		}
		// Nested: within its parent's bar (a child cannot outlive its owner).
		p := byID[parent[id]]
		if r.Left < p.Left-1 || r.Right > p.Right+1 {
			t.Errorf("agent %d's bar (%.1f-%.1f) is outside its parent %d's (%.1f-%.1f)", id, r.Left, r.Right, parent[id], p.Left, p.Right)
		}
	}
	if got := [...]string{byID[quick.ID].Outcome, byID[other.ID].Outcome, byID[leaf.ID].Outcome, byID[root.ID].Outcome}; got != [...]string{"completed", "failed", "cancelled", ""} {
		t.Errorf("bar outcomes (quick, writer, scraper, root): %q", got)
	}
	// The running root's bar reaches the right end: now.
	if r := byID[root.ID]; abs(r.Right-r.WantRight) > 2 || r.Right < byID[mid.ID].Right {
		t.Errorf("the running root's bar ends at %.1f px, before its ended child's", r.Right)
	}
	for _, w := range []int64{1280, 800} {
		viewport(t, ctx, w)
		screenshot(t, ctx, fmt.Sprintf("21-timeline-%d.png", w))
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// A busy agent's CPU shows in its panel, from its cgroup, live; the
// agent's URL survives a reload.
func TestDashboardCPUAndAgentURL(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	if st, _ := d.Client.Status(context.Background()); st.Containment != "cgroup2" {
		t.Skipf("containment is %s: CPU is read from cgroups", st.Containment)
	}
	root := spawnSh(t, d, "Coordinator", 0, "exec sleep 3600")
	busy := spawnSh(t, d, "Busy", root.ID, "while :; do :; done")
	base := "http://" + d.HTTPAddr()
	login(t, ctx, base, d.OperatorToken())
	do(t, ctx, "open the busy agent's URL", chromedp.Navigate(fmt.Sprintf("%s/#/agents/%d", base, busy.ID)))
	waitJS(t, ctx, "its panel", fmt.Sprintf(`(document.querySelector('#panel h2') || {}).textContent?.startsWith("#%d ")`, busy.ID))
	// A spinning process on a shared 2-core machine: well above idle.
	waitJS(t, ctx, "its CPU shown", `+(document.querySelector('#cpu') || {dataset: {}}).dataset.pct > 10`)
	res, err := d.Client.Resources(context.Background(), busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Memory and pids only where the controllers exist.
	if hasMem := eval[bool](t, ctx, `!!document.querySelector('#mem')`); hasMem != (res.MemoryBytes != nil) {
		t.Errorf("memory shown %v, the controller present %v", hasMem, res.MemoryBytes != nil)
	}
	if hasPids := eval[bool](t, ctx, `!!document.querySelector('#pids')`); hasPids != (res.Pids != nil) {
		t.Errorf("pids shown %v, the controller present %v", hasPids, res.Pids != nil)
	}
	// Its pids limit, the profile's default, with its use and how it binds.
	if len(res.Limits) == 0 || res.Limits[0].Name != "pids" {
		t.Fatalf("resources carry no pids limit: %+v", res.Limits)
	}
	pids := eval[string](t, ctx, `(document.querySelector('#res .limit[data-name="pids"]') || {}).textContent || ""`)
	if want := fmt.Sprintf("of %.0f tasks", res.Limits[0].Value); !strings.Contains(pids, want) || !strings.Contains(pids, res.Limits[0].By) {
		t.Errorf("the pids limit reads %q: want %q and %q", pids, want, res.Limits[0].By)
	}
	if up := eval[string](t, ctx, `document.querySelector('#facts').textContent`); !strings.Contains(up, "uptime") || !strings.Contains(up, "pid") {
		t.Errorf("a running agent's facts read %q: want its uptime and pid", up)
	}
	screenshot(t, ctx, "22-cpu-1440.png")

	do(t, ctx, "reload", chromedp.Reload())
	waitJS(t, ctx, "the dashboard again", `document.body.dataset.ready === "true"`)
	waitJS(t, ctx, "the same agent's panel after the reload", fmt.Sprintf(`(document.querySelector('#panel h2') || {}).textContent?.startsWith("#%d ") && document.querySelector('#graph .node.selected').dataset.id === "%d"`, busy.ID, busy.ID))
	if h := eval[string](t, ctx, `location.hash`); h != fmt.Sprintf("#/agents/%d", busy.ID) {
		t.Errorf("after the reload the URL is %q", h)
	}
	// Selecting another agent changes the URL; so does the timeline.
	do(t, ctx, "select the root", click(nodeSel(root.ID)+" rect"))
	waitJS(t, ctx, "the root's URL", fmt.Sprintf(`location.hash === "#/agents/%d"`, root.ID))
	do(t, ctx, "the timeline", click("#view-timeline"))
	waitJS(t, ctx, "the timeline's URL", fmt.Sprintf(`location.hash === "#/timeline/%d"`, root.ID))
	do(t, ctx, "reload", chromedp.Reload())
	waitJS(t, ctx, "the timeline after the reload", `document.body.dataset.ready === "true" && !document.querySelector('#timeline').hidden && document.querySelectorAll('#timeline .tl-bar').length === 2`)
	// An id that is no agent says so.
	do(t, ctx, "a wrong id", chromedp.Navigate(base+"/#/agents/999"))
	waitJS(t, ctx, "the toast", `document.querySelector('#toast').textContent.includes("no agent #999")`)
}

// 1,000 events page back and forth, 100 a page, without gaps or overlaps,
// and filter by type and agent on the server.
func TestDashboardEventPaging(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithProfile(wideProfile(t)))
	bg := context.Background()
	start := time.Now()
	root, err := d.Client.Register(bg, kin.RegisterRequest{Name: "Coordinator", Responsible: "Dr. Schmidt"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := d.Client.Register(bg, kin.RegisterRequest{Name: fmt.Sprintf("w-%d", i), Parent: root.ID}); err != nil {
			t.Fatal(err)
		}
	}
	// 1,000 more events: governor changes, some at once. (Not 1,000
	// agents: the daemon takes long to close with that many.)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := d.Client.SetGovernor(bg, "max_children", fmt.Sprint(10+i%50)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("1,000 events took %v", time.Since(start))
	st, err := d.Client.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	last := st.LastEvent
	login(t, ctx, "http://"+d.HTTPAddr(), d.OperatorToken())
	seqs := func() []int64 {
		return eval[[]int64](t, ctx, `[...document.querySelectorAll('#events tbody tr')].map(r => +r.dataset.seq)`)
	}
	waitJS(t, ctx, "the latest page", fmt.Sprintf(`(document.querySelector('#events tbody tr') || {dataset: {}}).dataset.seq === "%d"`, last))
	want := last
	for page := range 4 {
		got := seqs()
		if len(got) != 100 {
			t.Fatalf("page %d has %d rows, want 100", page, len(got))
		}
		for _, s := range got {
			if s != want {
				t.Fatalf("page %d: seq %d where %d was due (rows %v)", page, s, want, got)
			}
			want--
		}
		first := got[len(got)-1]
		do(t, ctx, "older", click("#ev-older"))
		waitJS(t, ctx, "the older page", fmt.Sprintf(`(document.querySelector('#events tbody tr') || {dataset: {}}).dataset.seq === "%d"`, first-1))
	}
	do(t, ctx, "newer", click("#ev-newer"))
	waitJS(t, ctx, "the newer page", fmt.Sprintf(`(document.querySelector('#events tbody tr') || {dataset: {}}).dataset.seq === "%d"`, last-300))
	screenshot(t, ctx, "23-events-paged.png")
	// To the very first event, then back to the latest.
	for range 20 {
		if eval[bool](t, ctx, `document.querySelector('#ev-older').disabled`) {
			break
		}
		top := eval[string](t, ctx, `document.querySelector('#events tbody tr:last-child').dataset.seq`)
		do(t, ctx, "older", click("#ev-older"))
		waitJS(t, ctx, "the older page", fmt.Sprintf(`document.querySelector('#events tbody tr').dataset.seq === String(%s - 1)`, top))
	}
	if s := seqs(); len(s) == 0 || s[len(s)-1] != 1 {
		t.Errorf("the oldest page ends at %v, want event 1", s)
	}
	do(t, ctx, "latest", click("#ev-latest"))
	waitJS(t, ctx, "the latest page", fmt.Sprintf(`document.querySelector('#events tbody tr').dataset.seq === "%d"`, last))

	// Filter on the server: one agent's events, by name, of a type prefix.
	do(t, ctx, "filter", chromedp.SendKeys(chromedp.CSS("#ev-agent"), "w-3"), chromedp.SendKeys(chromedp.CSS("#ev-type"), "agent.reg"))
	waitJS(t, ctx, "w-3's registration alone", `(() => { const rs = [...document.querySelectorAll('#events tbody tr')]; return rs.length === 1 && rs[0].dataset.type === "agent.registered" })()`)
	do(t, ctx, "a type that is none", chromedp.SendKeys(chromedp.CSS("#ev-type"), "zzz"))
	waitJS(t, ctx, "no such type", `document.querySelector('#ev-count').textContent.includes("no event type starts with")`)
}

// A live agent's log lines appear as it writes them; the log can be
// searched and downloaded.
func TestDashboardLogFollow(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	a := spawnSh(t, d, "Chatty", 0, `i=0; while :; do i=$((i+1)); echo "tick $i"; sleep 0.05; done`)
	base := "http://" + d.HTTPAddr()
	login(t, ctx, base, d.OperatorToken())
	do(t, ctx, "open the agent", chromedp.Navigate(fmt.Sprintf("%s/#/agents/%d", base, a.ID)))
	waitJS(t, ctx, "following its log", `!!document.querySelector('#log-follow') && document.querySelector('#log-follow').checked && +document.querySelector('#log').dataset.lines > 0`)
	n := eval[int](t, ctx, `+document.querySelector('#log').dataset.lines`)
	// Without reloading anything, later lines arrive.
	waitJS(t, ctx, "new lines", fmt.Sprintf(`document.querySelector('#log').textContent.includes("tick %d\n")`, n+20))
	do(t, ctx, "search", chromedp.SendKeys(chromedp.CSS("#log-search"), "tick 1"))
	waitJS(t, ctx, "only matching lines", `(() => { const ls = document.querySelector('#log').textContent.split('\n'); return ls.length > 0 && ls.every(l => l.includes("tick 1")) && document.querySelector('#log-count').textContent.includes("match") })()`)
	if href := eval[string](t, ctx, `document.querySelector('#log-download').getAttribute('href') + ' ' + document.querySelector('#log-download').getAttribute('download')`); href != fmt.Sprintf("/v1/agents/%d/logs kin-agent-%d.log", a.ID, a.ID) {
		t.Errorf("the download link is %q", href)
	}
	screenshot(t, ctx, "24-log-follow.png")
	// Stopping the agent ends the stream; what it wrote stays.
	stop(t, d, a.ID)
	waitEnded(t, d, a.ID)
	waitJS(t, ctx, "the panel of the ended agent", `document.querySelector('#facts').textContent.includes("duration")`)
}
