package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/mcpserver"
	"github.com/kin-agents/kin/kin"
)

func TestMCPHTTPHandlerServesToolsAndRefusesUnknownCallers(t *testing.T) {
	d := kintest.StartDaemon(t)
	h := mcpserver.NewHTTPHandler(func(r *http.Request) (kin.Service, error) {
		if r.Header.Get("Authorization") != "Bearer operator" {
			return nil, kin.Errorf(kin.ECodeUnauthorized, "no operator token")
		}
		return d.Client, nil
	}, mcpserver.Options{Version: "test"})
	srv := httptest.NewServer(h)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{"operator"}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "test"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != len(allTools) {
		t.Fatalf("list tools over HTTP: %v, %v", res, err)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_result", Arguments: map[string]any{"id": 999}})
	if err != nil || !r.IsError || !strings.HasPrefix(text(r), string(kin.ECodeNotFound)) {
		t.Errorf("get_result 999 over HTTP: %v, %v", r, err)
	}

	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: %s, want 401", resp.Status)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
