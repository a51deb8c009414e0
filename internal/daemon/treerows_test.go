package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
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
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.SocketPath())
	}}}
	defer hc.CloseIdleConnections()
	get := func(accept string) (string, []*kin.TreeNode) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(cctx, "GET", "http://kin/v1/agents/"+root.ID.String()+"/tree", nil)
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
	show := func(v any) string {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := show(nested)
	if len(nested) != 1 || len(nested[0].Children) != 3 || nested[0].Children[1].Exit == nil || len(nested[0].Children[0].Command) == 0 {
		t.Fatalf("the nested tree lacks what this test compares:\n%s", want)
	}
	for _, accept := range []string{httpapi.TreeRowsType, httpapi.TreeColumnsType} {
		ct, got := get(accept)
		if ct != accept {
			t.Fatalf("Accept %q: Content-Type %q", accept, ct)
		}
		if have := show(got); have != want {
			t.Fatalf("%s says\n%s\nthe nested JSON\n%s", accept, have, want)
		}
	}
	sdk, err := d.Client.Tree(ctx, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	if have := show(sdk); have != want {
		t.Fatalf("client.Tree says\n%s\nthe nested JSON\n%s", have, want)
	}
	inProcess, err := d.Daemon.Tree(ctx, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	if have := show(inProcess); have != want {
		t.Fatalf("Daemon.Tree says\n%s\nthe nested JSON\n%s", have, want)
	}
	// An unknown agent is the usual error answer, before any row.
	if _, err := d.Client.Tree(ctx, 999999); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Fatalf("tree of an unknown agent: %v", err)
	}
}
