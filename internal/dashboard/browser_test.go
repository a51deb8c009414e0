package dashboard_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the README's screenshot, docs/dashboard.png")

// browser starts headless Chromium (Debian's chromium package) for one
// test and returns a tab's context. It skips only where no Chromium is
// installed; .ci/run installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("no Chromium on this machine (apt-get install chromium): the browser tests need a real browser")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1440, 900), chromedp.UserDataDir(t.TempDir()),
		// Chromium makes its singleton's socket folder
		// (org.chromium.Chromium.*) in TMPDIR and leaves it there when it
		// exits: 770 of them had piled up in /tmp over a day of runs.
		chromedp.Env("TMPDIR="+t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc() // waits for the browser to exit
	})
	if err := chromedp.Do(ctx); err != nil { // start the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// outputDir is where the browser tests leave their screenshots:
// $KIN_TEST_OUTPUT/dashboard, else test-output/dashboard at the repository's
// root (as .ci/run has it).
func outputDir(t *testing.T) string {
	dir := filepath.Join("..", "..", "test-output", "dashboard")
	if o := os.Getenv("KIN_TEST_OUTPUT"); o != "" {
		dir = filepath.Join(o, "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(outputDir(t), name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return buf
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitJS waits until the expression is true in the page.
func waitJS(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, js, err)
	}
}

// seedFamily spawns seed 000's example as real processes: a research
// coordinator for which Dr. Schmidt is responsible, three children and
// three grandchildren, each running sleep. And one agent of another
// responsible party, for the filter.
func seedFamily(t *testing.T, d *kintest.Daemon) map[string]*kin.Agent {
	t.Helper()
	ctx := context.Background()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*kin.Agent{}
	spawn := func(name, role, parent, responsible string) {
		req := kin.SpawnRequest{Command: []string{sleep, "3600"}}
		req.Name, req.Role, req.Responsible = name, role, responsible
		if parent != "" {
			req.Parent = out[parent].ID
		}
		a, err := d.Client.Spawn(ctx, req)
		if err != nil {
			t.Fatalf("spawn %s: %v", name, err)
		}
		out[name] = a
	}
	spawn("Research-Coordinator", "coordinator", "", "Dr. Schmidt, COAI Research")
	spawn("Data-Collector", "collector", "Research-Coordinator", "")
	spawn("Report-Writer", "writer", "Research-Coordinator", "")
	spawn("Peer-Reviewer", "reviewer", "Research-Coordinator", "")
	spawn("Web-Scraper", "scraper", "Data-Collector", "")
	spawn("API-Fetcher", "fetcher", "Data-Collector", "")
	spawn("LaTeX-Formatter", "formatter", "Report-Writer", "")
	spawn("Night-Watch", "monitor", "", "Ops Team")
	for name, a := range out {
		kintest.WaitFor(t, 10*time.Second, name+" running", func() bool {
			got, err := d.Client.Agent(ctx, a.ID)
			if err == nil {
				out[name] = got
			}
			return err == nil && got.PID != 0
		})
	}
	return out
}

func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitReady(chromedp.CSS("#graph")),
	)
	waitJS(t, ctx, "the dashboard", `document.body.dataset.ready === "true"`)
}

// click clicks in one step in the page, so that a redraw between finding
// the element and clicking it cannot lose the click.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).dispatchEvent(new MouseEvent('click', {bubbles: true}))`, sel))
}

func nodeState(id kin.AgentID) string {
	return fmt.Sprintf(`(document.querySelector('#graph .node[data-id="%d"]') || {dataset: {}}).dataset.state`, id)
}

func TestDashboardInChromium(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	fam := seedFamily(t, d)
	base := "http://" + d.HTTPAddr()

	// Before logging in there is nothing but the login page.
	do(t, ctx, "open", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if n := eval[int](t, ctx, `document.querySelectorAll('#graph, .node').length`); n != 0 {
		t.Fatalf("the login page shows %d parts of the dashboard", n)
	}
	screenshot(t, ctx, "01-login.png")
	do(t, ctx, "a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS(".error")))
	if msg := eval[string](t, ctx, `document.querySelector('.error').textContent`); !strings.Contains(msg, "not the operator token") {
		t.Fatalf("a wrong token says %q", msg)
	}

	login(t, ctx, base, d.OperatorToken())

	// Seed 000's tree: eight agents (seven of Dr. Schmidt's, one of the
	// Ops Team's) in generations 0, 1 and 2, under their responsible parties.
	waitJS(t, ctx, "eight nodes", `document.querySelectorAll('#graph .node').length === 8`)
	gens := eval[map[string]int](t, ctx, `[...document.querySelectorAll('#graph .node')].reduce((m, n) => (m[n.dataset.gen] = (m[n.dataset.gen] || 0) + 1, m), {})`)
	if want := map[string]int{"0": 2, "1": 3, "2": 3}; fmt.Sprint(gens) != fmt.Sprint(want) {
		t.Fatalf("nodes per generation: %v, want %v", gens, want)
	}
	humans := eval[[]string](t, ctx, `[...document.querySelectorAll('#graph .human')].map(h => h.dataset.responsible)`)
	if !slices.Equal(humans, []string{"Dr. Schmidt, COAI Research", "Ops Team"}) {
		t.Fatalf("responsible parties drawn: %q", humans)
	}
	// Rows: every generation below the one before, the humans on top.
	rows := eval[[]float64](t, ctx, `[0,1,2].map(g => document.querySelector('#graph .node[data-gen="'+g+'"]').getBoundingClientRect().top)`)
	if !(rows[0] < rows[1] && rows[1] < rows[2]) {
		t.Fatalf("generation rows at %v are not top to bottom", rows)
	}
	if st := eval[string](t, ctx, nodeState(fam["Web-Scraper"].ID)); st != string(fam["Web-Scraper"].State) {
		t.Fatalf("Web-Scraper is drawn %s, it is %s", st, fam["Web-Scraper"].State)
	}
	fill := func(id kin.AgentID) string {
		return eval[string](t, ctx, fmt.Sprintf(`getComputedStyle(document.querySelector('#graph .node[data-id="%d"] rect')).fill`, id))
	}
	before := fill(fam["Web-Scraper"].ID)
	screenshot(t, ctx, "02-tree.png")

	// Kill a process: its node changes colour, from the event stream alone.
	if err := syscall.Kill(fam["Web-Scraper"].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "Web-Scraper drawn as ended", fmt.Sprintf(`["exited", "failed"].includes(%s)`, nodeState(fam["Web-Scraper"].ID)))
	if after := fill(fam["Web-Scraper"].ID); after == before {
		t.Fatalf("the killed agent's node is still %s", after)
	}
	screenshot(t, ctx, "03-killed.png")

	// Stop Data-Collector's subtree from the panel: the confirmation names
	// what it affects (API-Fetcher still lives; Web-Scraper already ended).
	dc, af := fam["Data-Collector"].ID, fam["API-Fetcher"].ID
	do(t, ctx, "select Data-Collector", click(fmt.Sprintf(`#graph .node[data-id="%d"] rect`, dc)),
		chromedp.WaitVisible(chromedp.CSS(`#panel button[data-act="stop"]`)))
	waitJS(t, ctx, "the panel's budget", `!!document.querySelector('#panel .budget')`)
	chainText := eval[string](t, ctx, `document.querySelector('#panel .chain').textContent`)
	if !strings.Contains(chainText, "Research-Coordinator") || !strings.Contains(chainText, "Dr. Schmidt, COAI Research") {
		t.Fatalf("the responsibility chain reads %q", chainText)
	}
	screenshot(t, ctx, "04-panel.png")
	do(t, ctx, "ask to stop", chromedp.Click(chromedp.CSS(`#panel button[data-act="stop"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	text := eval[string](t, ctx, `document.querySelector('#confirm-text').textContent`)
	if !strings.Contains(text, "and 1 descendant") {
		t.Fatalf("the confirmation says %q, want it to name 1 descendant", text)
	}
	if list := eval[string](t, ctx, `document.querySelector('#confirm-list').textContent`); !strings.Contains(list, "API-Fetcher") {
		t.Fatalf("the confirmation lists %q", list)
	}
	screenshot(t, ctx, "05-confirm.png")
	// Nothing happens before the confirmation.
	if a, err := d.Client.Agent(context.Background(), dc); err != nil || a.State.Terminal() {
		t.Fatalf("before confirming, Data-Collector is %v (%v)", a, err)
	}
	do(t, ctx, "confirm", click("#confirm-ok"))
	waitJS(t, ctx, "the cascade drawn", fmt.Sprintf(`%s === "cancelled" && %s === "cancelled"`, nodeState(dc), nodeState(af)))
	for _, id := range []kin.AgentID{dc, af} {
		if a, err := d.Client.Agent(context.Background(), id); err != nil || a.State != kin.StateCancelled {
			t.Fatalf("after the stop, agent %d is %v (%v)", id, a, err)
		}
	}
	if a, _ := d.Client.Agent(context.Background(), fam["Report-Writer"].ID); a.State.Terminal() {
		t.Fatalf("the stop reached outside the subtree: Report-Writer is %s", a.State)
	}
	waitJS(t, ctx, "agent.stop in the events view", `[...document.querySelectorAll('#events tbody tr')].some(r => r.dataset.type === "agent.stop")`)
	screenshot(t, ctx, "06-cascade.png")

	// Suspend and resume a subtree, promote a stage, revoke: each asks first,
	// naming how many descendants it touches.
	confirm := func(id kin.AgentID, act, wantText string) {
		t.Helper()
		do(t, ctx, "select #"+fmt.Sprint(id), click(fmt.Sprintf(`#graph .node[data-id="%d"] rect`, id)),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#panel button[data-act=%q]:not([disabled])`, act))))
		waitJS(t, ctx, "the panel of #"+fmt.Sprint(id), fmt.Sprintf(`document.querySelector('#panel h2').textContent.startsWith("#%d ")`, id))
		do(t, ctx, act, click(fmt.Sprintf(`#panel button[data-act=%q]`, act)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
		if text := eval[string](t, ctx, `document.querySelector('#confirm-text').textContent`); !strings.Contains(text, wantText) {
			t.Fatalf("%s #%d asks %q, want %q in it", act, id, text, wantText)
		}
		do(t, ctx, "confirm "+act, click("#confirm-ok"), chromedp.WaitNotVisible(chromedp.CSS("#confirm")))
	}
	rw, lf := fam["Report-Writer"].ID, fam["LaTeX-Formatter"].ID
	confirm(rw, "suspend", "and 1 descendant")
	waitJS(t, ctx, "the subtree suspended", fmt.Sprintf(`%s === "suspended" && %s === "suspended"`, nodeState(rw), nodeState(lf)))
	screenshot(t, ctx, "06b-suspended.png")
	confirm(rw, "resume", "and 1 descendant")
	waitJS(t, ctx, "the subtree resumed", fmt.Sprintf(`%s !== "suspended" && %s !== "suspended"`, nodeState(rw), nodeState(lf)))
	pr := fam["Peer-Reviewer"].ID
	do(t, ctx, "pick a stage", click(fmt.Sprintf(`#graph .node[data-id="%d"] rect`, pr)),
		chromedp.WaitVisible(chromedp.CSS(`#panel #stage`)))
	waitJS(t, ctx, "the panel of Peer-Reviewer", fmt.Sprintf(`document.querySelector('#panel h2').textContent.startsWith("#%d ")`, pr))
	do(t, ctx, "choose supervised", chromedp.Evaluate[chromedp.Void](`(s => { s.value = "supervised"; s.dispatchEvent(new Event('change', {bubbles: true})) })(document.querySelector('#stage'))`))
	confirm(pr, "promote", "and 0 descendants")
	kintest.WaitFor(t, 10*time.Second, "Peer-Reviewer promoted", func() bool {
		p, err := d.Client.Policy(context.Background(), pr)
		return err == nil && p.Stage == "supervised"
	})
	nw := fam["Night-Watch"].ID
	confirm(nw, "revoke", "cannot be undone")
	kintest.WaitFor(t, 10*time.Second, "Night-Watch revoked", func() bool {
		a, err := d.Client.Agent(context.Background(), nw)
		return err == nil && a.Status == kin.StatusRevoked
	})
	waitJS(t, ctx, "Night-Watch drawn revoked", fmt.Sprintf(`document.querySelector('#graph .node[data-id="%d"]').dataset.status === "revoked"`, nw))

	// Filter by responsible party.
	do(t, ctx, "filter Ops Team", chromedp.SetValue(chromedp.CSS("#f-responsible"), "Ops Team"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#f-responsible').dispatchEvent(new Event('change'))`))
	waitJS(t, ctx, "one node", `document.querySelectorAll('#graph .node').length === 1`)
	if got := eval[string](t, ctx, `document.querySelector('#graph .node .name').textContent`); got != "Night-Watch" {
		t.Fatalf("filtered to the Ops Team, the graph shows %q", got)
	}
	do(t, ctx, "filter Dr. Schmidt", chromedp.SetValue(chromedp.CSS("#f-responsible"), "Dr. Schmidt, COAI Research"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#f-responsible').dispatchEvent(new Event('change'))`))
	waitJS(t, ctx, "seven nodes", `document.querySelectorAll('#graph .node').length === 7`)
	screenshot(t, ctx, "07-filtered.png")

	// The events view filters by agent and type.
	do(t, ctx, "filter events", chromedp.SendKeys(chromedp.CSS("#ev-type"), "agent.stop"))
	waitJS(t, ctx, "only agent.stop rows", `(() => { const rs = [...document.querySelectorAll('#events tbody tr')]; return rs.length > 0 && rs.every(r => r.dataset.type === "agent.stop") })()`)

	// Everything the page fetched was the dashboard's own files or the /v1/ API.
	urls := eval[[]string](t, ctx, `performance.getEntriesByType('resource').map(e => new URL(e.name).pathname)`)
	for _, u := range urls {
		if !strings.HasPrefix(u, "/v1/") && !strings.HasPrefix(u, "/assets/") {
			t.Errorf("the dashboard fetched %s, which is neither an asset nor the /v1/ API", u)
		}
	}
	if !slices.ContainsFunc(urls, func(u string) bool { return u == "/v1/events" }) || !slices.Contains(urls, "/v1/agents") {
		t.Errorf("the dashboard did not use /v1/agents and /v1/events: %q", urls)
	}

	if *updateScreenshot {
		do(t, ctx, "clear the filters",
			chromedp.Evaluate[chromedp.Void](`for (const [sel, ev] of [['#f-responsible', 'change'], ['#ev-type', 'input']]) { const el = document.querySelector(sel); el.value = ''; el.dispatchEvent(new Event(ev)); }`),
			click(fmt.Sprintf(`#graph .node[data-id="%d"] rect`, fam["Report-Writer"].ID)))
		waitJS(t, ctx, "the panel's budget", `!!document.querySelector('#panel .budget')`)
		png := screenshot(t, ctx, "dashboard.png")
		if err := os.WriteFile("../../docs/dashboard.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A family of 2,011 agents (10 children, 100 grandchildren, 1,900
// great-grandchildren) stays usable: the page opens with the deeper
// generations folded, search finds a great-grandchild by name and unfolds
// its ancestors, and every agent can still be drawn.
func TestDashboardWith2000Agents(t *testing.T) {
	ctx := browser(t)
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithProfile(wideProfile(t)))
	total := registerFamily(t, d)
	target := "worker-7-3-11"
	base := "http://" + d.HTTPAddr()
	start := time.Now()
	login(t, ctx, base, d.OperatorToken())
	waitJS(t, ctx, "the tree", `document.querySelectorAll('#graph .node').length > 0`)
	t.Logf("%d agents: the page was ready %v after the login began", total, time.Since(start).Round(time.Millisecond))
	if s := eval[string](t, ctx, `document.querySelector('#summary').textContent`); !strings.HasPrefix(s, fmt.Sprintf("%d agents", total)) {
		t.Fatalf("summary %q, want %d agents", s, total)
	}
	drawn := eval[int](t, ctx, `document.querySelectorAll('#graph .node').length`)
	folded := eval[int](t, ctx, `[...document.querySelectorAll('#graph .toggle text')].filter(t => t.textContent.startsWith('+')).length`)
	if drawn >= total || drawn > 250 || folded == 0 {
		t.Fatalf("the first view draws %d of %d agents with %d folded subtrees: want the deep generations folded", drawn, total, folded)
	}
	screenshot(t, ctx, "10-2000-folded.png")

	do(t, ctx, "search", chromedp.SendKeys(chromedp.CSS("#search"), target+"\r"))
	waitJS(t, ctx, "the match selected", fmt.Sprintf(`(document.querySelector('#panel h2') || {}).textContent?.endsWith(%q)`, target))
	sel := eval[string](t, ctx, `document.querySelector('#graph .node.selected .name').textContent`)
	if sel != target {
		t.Fatalf("the selected node is %q, want %q", sel, target)
	}
	// The match is inside the view.
	inView := eval[bool](t, ctx, `(() => { const r = document.querySelector('#graph .node.selected').getBoundingClientRect(), s = document.querySelector('#graph').getBoundingClientRect(); return r.left >= s.left && r.right <= s.right && r.top >= s.top && r.bottom <= s.bottom })()`)
	if !inView {
		t.Fatal("the found agent is outside the view")
	}
	screenshot(t, ctx, "11-2000-search.png")

	start = time.Now()
	do(t, ctx, "expand all", click("#expand-all"))
	waitJS(t, ctx, "every agent drawn", fmt.Sprintf(`document.querySelectorAll('#graph .node').length === %d`, total))
	t.Logf("drawing all %d agents took %v", total, time.Since(start).Round(time.Millisecond))
	screenshot(t, ctx, "12-2000-all.png")
}

// wideProfile is the default profile without the per-parent children
// limit, for a family wider than it allows.
func wideProfile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wide.json")
	body := `{"name": "wide", "max_generation_depth": 10, "max_children": 0}`
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDashboardNamesHostsInAFleet: two daemons on one store are two hosts
// of a fleet; the dashboard of either shows the whole family and, as its
// agents span hosts, each node's host and a host row in the agent's panel.
// One host's dashboard names none (TestDashboardInChromium's nodes carry no
// data-host).
func TestDashboardNamesHostsInAFleet(t *testing.T) {
	ctx := browser(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "fleet.db")
	key := kintest.WithLogKeyDir(filepath.Join(t.TempDir(), "log-key"))
	alpha := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithStore(db), kintest.WithHostName("alpha"), key)
	beta := kintest.StartDaemon(t, kintest.WithStore(db), kintest.WithHostName("beta"), key)
	root, err := alpha.Client.Register(context.Background(), kin.RegisterRequest{Name: "root", Responsible: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	kid, err := beta.Client.Register(context.Background(), kin.RegisterRequest{Name: "kid", Parent: root.ID})
	if err != nil {
		t.Fatal(err)
	}
	login(t, ctx, "http://"+alpha.HTTPAddr(), alpha.OperatorToken())
	waitJS(t, ctx, "both hosts' agents, each node naming its host",
		fmt.Sprintf(`document.querySelector('#graph .node[data-id="%d"]')?.dataset.host === "alpha" && document.querySelector('#graph .node[data-id="%d"]')?.dataset.host === "beta"`, root.ID, kid.ID))
	if got := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#graph .node[data-id="%d"] .host').textContent`, kid.ID)); got != "beta" {
		t.Errorf("kid's node shows host %q", got)
	}
	do(t, ctx, "open kid's panel", click(fmt.Sprintf(`#graph .node[data-id="%d"]`, kid.ID)))
	waitJS(t, ctx, "the panel's host row", `[...document.querySelectorAll('#facts dt')].some((dt) => dt.textContent === 'host' && dt.nextElementSibling.textContent === 'beta')`)
}
