package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestTreeRowsMatchTheNestedJSON: a subtree of running, exited and only
// registered agents (commands, pids, exits, times, a requested_by), read
// through the operator socket in the streamed form v2 (what client.Tree
// asks for first), in the form v1 and as the nested JSON, and in the
// daemon's own process, is the same tree every way: the store's rows and
// the wire form's reader agree on every field.
func TestTreeRowsMatchTheNestedJSON(t *testing.T) {
	d := kintest.StartDaemon(t)
	root := spawnAgent(t, d.Client, "rows-root", 0, "sleep")
	spawnAgent(t, d.Client, "rows-sleeper", root.ID, "sleep")
	ended := spawnAgent(t, d.Client, "rows-exit", root.ID, "exit 3")
	waitAgent(t, d.Client, ended.ID, "ended", func(a *kin.Agent) bool { return !a.EndedAt.IsZero() })
	mid, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "rows-registered", Parent: root.ID, Role: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "rows-grandchild", Parent: mid.ID}); err != nil {
		t.Fatal(err)
	}
	nested := sameTreeEveryWay(t, d, root.ID)
	if len(nested) != 1 || len(nested[0].Children) != 3 || nested[0].Children[1].Exit == nil || len(nested[0].Children[0].Command) == 0 {
		t.Fatalf("the nested tree lacks what this test compares:\n%s", showTree(t, nested))
	}
	// The forest (GET /v1/tree): this tree and two more roots, one of them
	// ended, the same every way too.
	other := spawnAgent(t, d.Client, "rows-other-root", 0, "exit 0")
	waitAgent(t, d.Client, other.ID, "ended", func(a *kin.Agent) bool { return !a.EndedAt.IsZero() })
	lone, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "rows-lone-root"})
	if err != nil {
		t.Fatal(err)
	}
	forest := sameTreeEveryWay(t, d, 0)
	if len(forest) != 3 || forest[0].ID != root.ID || forest[1].ID != other.ID || forest[2].ID != lone.ID || countNodes(forest) != 7 {
		t.Fatalf("the forest is not the three roots and their 7 agents:\n%s", showTree(t, forest))
	}
	if have, want := showTree(t, forest[:1]), showTree(t, nested); have != want {
		t.Fatalf("the forest's first tree\n%s\nis not the subtree\n%s", have, want)
	}
	// An agent's forest is its own subtree (the form v2: client.Tree's).
	trees, err := d.Client.ActingAs(mid.ID.String()).Tree(ctx, 0)
	if err != nil || len(trees) != 1 || trees[0].ID != mid.ID || countNodes(trees) != 2 {
		t.Fatalf("the forest of agent %d: %v\n%s", mid.ID, err, showTree(t, trees))
	}
	// An unknown agent is the usual error answer, before any row.
	if _, err := d.Client.Tree(ctx, 999999); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Fatalf("tree of an unknown agent: %v", err)
	}
}

// sameTreeEveryWay reads root's subtree (root 0: the forest) through the
// operator socket in the streamed form v2, in the form v1 and as the
// nested JSON, through client.Tree and in the daemon's own process, fails
// unless every way gives the same tree, and returns it.
func sameTreeEveryWay(t *testing.T, d *kintest.Daemon, root kin.AgentID) []*kin.TreeNode {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.SocketPath())
	}}}
	defer hc.CloseIdleConnections()
	get := func(accept string) (string, []*kin.TreeNode) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		path := "/v1/agents/" + root.String() + "/tree"
		if root == 0 {
			path = "/v1/tree"
		}
		req, err := http.NewRequestWithContext(cctx, "GET", "http://kin"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("Accept %q: %d %s", accept, resp.StatusCode, body)
		}
		ct := resp.Header.Get("Content-Type")
		trees, err := httpapi.DecodeTree(ct, resp.Body)
		if err != nil {
			t.Fatalf("Accept %q (%s): %v", accept, ct, err)
		}
		return ct, trees
	}
	_, nested := get("")
	want := showTree(t, nested)
	for _, accept := range []string{httpapi.TreeRowsType, httpapi.TreeColumnsType} {
		ct, got := get(accept)
		if ct != accept {
			t.Fatalf("Accept %q: Content-Type %q", accept, ct)
		}
		if have := showTree(t, got); have != want {
			t.Fatalf("%s says\n%s\nthe nested JSON\n%s", accept, have, want)
		}
	}
	sdk, err := d.Client.Tree(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if have := showTree(t, sdk); have != want {
		t.Fatalf("client.Tree says\n%s\nthe nested JSON\n%s", have, want)
	}
	inProcess, err := d.Daemon.Tree(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if have := showTree(t, inProcess); have != want {
		t.Fatalf("Daemon.Tree says\n%s\nthe nested JSON\n%s", have, want)
	}
	return nested
}

func showTree(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLargeTreeThroughTheRowCache: a subtree large enough for the store's
// row cache (1,024 agents or more, read again and again) is the same tree
// every way, before and after some of its agents change status: the
// cached rows are dropped by the commits that changed them.
func TestLargeTreeThroughTheRowCache(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "wide.json")
	if err := os.WriteFile(prof, []byte(`{"name": "wide", "max_generation_depth": 10, "max_children": 0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := kintest.StartDaemon(t, kintest.WithProfile(prof))
	root, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "big-root"})
	if err != nil {
		t.Fatal(err)
	}
	const groups, each = 20, 55 // 1,121 agents with the root and the groups' heads
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			head, err := d.Client.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("big-%d", g), Parent: root.ID})
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("big-%d-%d", g, i), Parent: head.ID}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	first := sameTreeEveryWay(t, d, root.ID)
	if n := countNodes(first); n != 1+groups*(1+each) {
		t.Fatalf("the tree has %d agents, want %d", n, 1+groups*(1+each))
	}
	before := showTree(t, first)
	if again := showTree(t, sameTreeEveryWay(t, d, root.ID)); again != before {
		t.Fatalf("read again, the tree changed:\n%s\nwas\n%s", again, before)
	}
	heads := first[0].Children
	changed := map[kin.AgentID]bool{}
	for _, n := range []*kin.TreeNode{heads[3], heads[3].Children[7], heads[19].Children[54]} {
		if _, err := d.Client.SetStatus(ctx, kin.StatusRequest{ID: n.ID, Action: kin.ActionSuspend}); err != nil {
			t.Fatal(err)
		}
		changed[n.ID] = true
	}
	after := sameTreeEveryWay(t, d, root.ID)
	// The forest, as large, read twice (the second time from the cache).
	for read := range 2 {
		if forest := sameTreeEveryWay(t, d, 0); showTree(t, forest) != showTree(t, after) {
			t.Fatalf("read %d: the forest of one root is not its tree:\n%s", read+1, showTree(t, forest))
		}
	}
	var walk func(ns []*kin.TreeNode)
	walk = func(ns []*kin.TreeNode) {
		for _, n := range ns {
			if want := changed[n.ID]; want != (n.Status == kin.StatusSuspended) {
				t.Errorf("agent %d (%s) is %s after the suspensions", n.ID, n.Name, n.Status)
			}
			walk(n.Children)
		}
	}
	walk(after)
}

func countNodes(ns []*kin.TreeNode) int {
	n := 0
	for _, c := range ns {
		n += 1 + countNodes(c.Children)
	}
	return n
}
