package daemon_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/personserver"
)

// BenchmarkMCPToolCall measures one MCP tool call (list_children of an
// agent with one child) over streamable HTTP on loopback, as the operator
// (bearer token) and as an agent signing each request with its key (kin
// then verifies the HTTP signature and the agent token). The floor,
// measured in the same run, is the same question asked of the REST API
// over the same TCP listener with the operator token: what MCP's
// JSON-RPC framing, its stateless per-request session and the signature
// add. Report the ratios in docs/PERFORMANCE.md.
func BenchmarkMCPToolCall(b *testing.B) {
	d := kintest.StartDaemon(b, kintest.WithHTTP())
	ctx := context.Background()
	lead := spawnWithToken(b, d, "lead", 0, kinJWKS(b, "http://"+d.HTTPAddr(), personserver.PathAgentJWKS))
	spawnAgent(b, d.Client, "helper", lead.ID, "sleep")
	url := "http://" + d.HTTPAddr() + daemon.PathMCP

	b.Run("floor-rest-children", func(b *testing.B) {
		c, err := client.New(client.Config{Addr: d.HTTPAddr(), Token: d.OperatorToken()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		for b.Loop() {
			if kids, err := c.Children(ctx, lead.ID); err != nil || len(kids) != 1 {
				b.Fatal(kids, err)
			}
		}
	})
	call := func(b *testing.B, rt http.RoundTripper, args map[string]any) {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "test"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		params := &mcp.CallToolParams{Name: "list_children", Arguments: args}
		for b.Loop() {
			res, err := cs.CallTool(ctx, params)
			if err != nil || res.IsError {
				b.Fatal(res, err)
			}
		}
	}
	b.Run("mcp-operator", func(b *testing.B) {
		call(b, bearerTransport{d.OperatorToken()}, map[string]any{"id": lead.ID})
	})
	b.Run("mcp-agent-signed", func(b *testing.B) {
		call(b, lead.signer.Transport(nil), nil)
	})
}
