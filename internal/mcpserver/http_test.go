package mcpserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/mcpserver"
	"github.com/kin-agents/kin/kin"
)

func TestMCPHTTPHandlerServesToolsAndRefusesUnknownCallers(t *testing.T) {
	d := kintest.StartDaemon(t)
	mcpH := mcpserver.NewHTTPHandler(mcpserver.Options{Version: "test"})
	// What the daemon puts in front: here a token names the caller, and
	// only the operator's lets the tools read files.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer operator":
			r = r.WithContext(mcpserver.WithCaller(r.Context(), mcpserver.Caller{Service: d.Client, ReadsFiles: true}))
		case "Bearer remote":
			r = r.WithContext(mcpserver.WithCaller(r.Context(), mcpserver.Caller{Service: d.Client}))
		}
		mcpH.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(token string) *mcp.ClientSession {
		hc := &http.Client{Transport: bearer{token}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	cs := connect("operator")
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != len(allTools) {
		t.Fatalf("list tools over HTTP: %v, %v", res, err)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_result", Arguments: map[string]any{"id": 999}})
	if err != nil || !r.IsError || !strings.HasPrefix(text(r), string(kin.ECodeNotFound)) {
		t.Errorf("get_result 999 over HTTP: %v, %v", r, err)
	}

	// A caller without ReadsFiles cannot have this side read its refs or
	// template: refused, and nothing registered.
	ref := filepath.Join(t.TempDir(), "secret.md")
	if err := os.WriteFile(ref, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	remote := connect("remote")
	for _, args := range []map[string]any{
		{"command": []string{"/bin/true"}, "responsible": "t", "handoff": "Read it.", "refs": []string{ref}},
		{"command": []string{"/bin/true"}, "responsible": "t", "template": t.TempDir()},
	} {
		r, err := remote.CallTool(ctx, &mcp.CallToolParams{Name: "spawn_agent", Arguments: args})
		if err != nil || !r.IsError || !strings.HasPrefix(text(r), string(kin.ECodeForbidden)+": refs and template name files") {
			t.Errorf("spawn_agent %v without ReadsFiles: %v, %v; want forbidden", args, text(r), err)
		}
	}
	if as, err := d.Client.Agents(ctx, kin.AgentFilter{}); err != nil || len(as) != 0 {
		t.Errorf("agents after refused spawns: %v, %v; want none", as, err)
	}

	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a caller: %s, want 401", resp.Status)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTPCallEndsWhenItsClientGoesAway: a wait_agent without a
// timeout, over HTTP, ends on the server's side as soon as its client
// cancels the call; it does not wait on for the agent.
func TestMCPHTTPCallEndsWhenItsClientGoesAway(t *testing.T) {
	d := kintest.StartDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeper, err := d.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "sleeper", Responsible: "t"},
		Command: []string{"/bin/sh", "-c", "exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}

	mcpH := mcpserver.NewHTTPHandler(mcpserver.Options{Version: "test"})
	var waiting atomic.Int32 // wait_agent calls the server is answering
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"wait_agent"`)) {
			waiting.Add(1)
			defer waiting.Add(-1)
		}
		mcpH.ServeHTTP(w, r.WithContext(mcpserver.WithCaller(r.Context(), mcpserver.Caller{Service: d.Client})))
	}))
	defer srv.Close()
	// Stopping the agent ends any wait still running, so that the server
	// closes (and the test ends) even when the check below fails.
	defer d.Client.Stop(context.Background(), kin.StopRequest{ID: sleeper.ID})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	callCtx, stopCall := context.WithCancel(ctx)
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "wait_agent", Arguments: map[string]any{"id": sleeper.ID}})
		called <- err
	}()
	kintest.WaitFor(t, 10*time.Second, "the server to answer wait_agent", func() bool { return waiting.Load() == 1 })
	stopCall()
	if err := <-called; err == nil {
		t.Error("the cancelled call returned no error")
	}
	kintest.WaitFor(t, 10*time.Second, "the server's wait_agent to end", func() bool { return waiting.Load() == 0 })
}

// TestMCPHTTPRefusesCrossOriginBrowserRequests: a browser's cross-site
// request (a page on another origin posting to kin's MCP endpoint, CSRF or
// DNS rebinding) is refused with 403 before any tool runs, even with a
// caller in its context; the same request from a non-browser client (no
// Sec-Fetch-Site, no Origin) gets through.
func TestMCPHTTPRefusesCrossOriginBrowserRequests(t *testing.T) {
	d := kintest.StartDaemon(t)
	mcpH := mcpserver.NewHTTPHandler(mcpserver.Options{Version: "test"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mcpH.ServeHTTP(w, r.WithContext(mcpserver.WithCaller(r.Context(), mcpserver.Caller{Service: d.Client})))
	}))
	defer srv.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(header map[string]string) int {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a cross-site browser request: %d; want 403", code)
	}
	if code := post(map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("a request from another origin (no Sec-Fetch-Site): %d; want 403", code)
	}
	if code := post(nil); code != http.StatusOK {
		t.Errorf("a non-browser client's request: %d; want 200", code)
	}
}
