package daemon_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/kin"
)

// TestMCPOverHTTPAsTheOperatorAndAsASigningAgent drives kin's MCP tools
// over streamable HTTP on the daemon's loopback address with the SDK's
// client, as the operator (its token) and as an agent signing each
// request with its own key (its agent token in Signature-Key). The agent
// acts as itself: its spawn is its own child, it lists its own children,
// and it is refused on an agent outside its subtree and on files only the
// daemon could read. At the door, no credentials, a wrong token, a
// signature by another key, a body changed after signing, a body over the
// limit, and an agent that has ended are refused with 401 and change
// nothing.
func TestMCPOverHTTPAsTheOperatorAndAsASigningAgent(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := "http://" + d.HTTPAddr() + daemon.PathMCP
	connect := func(rt http.RoundTripper) *mcp.ClientSession {
		t.Helper()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "remote", Version: "test"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect to %s: %v", url, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	callTool := func(cs *mcp.ClientSession, name string, args map[string]any, out any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error: %v", name, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		if out != nil && !res.IsError {
			data, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(data, out); err != nil {
				t.Fatal(err)
			}
		}
		return b.String(), res.IsError
	}

	// The operator.
	op := connect(bearerTransport{d.OperatorToken()})
	tools, err := op.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 10 {
		t.Fatalf("the operator lists %v tools (%v), want 10", tools, err)
	}
	var outsider struct{ ID kin.AgentID }
	if said, isErr := callTool(op, "spawn_agent", map[string]any{"name": "outsider", "responsible": "ops",
		"command": []string{"/bin/sh", "-c", "exec sleep 600"}, "grace": "0s"}, &outsider); isErr || outsider.ID == 0 {
		t.Fatalf("the operator's spawn_agent: %s", said)
	}

	// An agent, signing with its key.
	lead := spawnWithToken(t, d, "lead", 0, kinJWKS(t, "http://"+d.HTTPAddr(), personserver.PathAgentJWKS))
	as := connect(lead.signer.Transport(nil))
	var helper struct {
		ID    kin.AgentID
		Agent *kin.Agent
	}
	if said, isErr := callTool(as, "spawn_agent", map[string]any{"name": "helper",
		"command": []string{"/bin/sh", "-c", "exec sleep 600"}, "grace": "0s"}, &helper); isErr {
		t.Fatalf("the agent's spawn_agent: %s", said)
	}
	if a := helper.Agent; a == nil || a.Parent != lead.ID || a.CreatedBy != kin.AgentCreatedBy(lead.ID) || a.PID == 0 {
		t.Fatalf("the agent's child: %+v; want a running child of %d created by it", a, lead.ID)
	}
	var kids struct{ Agents []*kin.Agent }
	callTool(as, "list_children", nil, &kids)
	if len(kids.Agents) != 1 || kids.Agents[0].ID != helper.ID {
		t.Errorf("the agent's list_children: %v; want only helper", kids.Agents)
	}
	ref := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(ref, []byte("notes"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		code kin.ErrorCode
	}{
		{"stop_agent", map[string]any{"id": outsider.ID}, kin.ECodeForbidden},
		{"spawn_agent", map[string]any{"parent": outsider.ID, "command": []string{"/bin/true"}}, kin.ECodeForbidden},
		{"get_result", map[string]any{"id": outsider.ID}, kin.ECodeForbidden},
		{"spawn_agent", map[string]any{"command": []string{"/bin/true"}, "handoff": "Read it.", "refs": []string{ref}}, kin.ECodeForbidden},
	} {
		if said, isErr := callTool(as, c.tool, c.args, nil); !isErr || !strings.HasPrefix(said, string(c.code)+": ") {
			t.Errorf("the agent's %s %v: %q; want a %s tool error", c.tool, c.args, said, c.code)
		}
	}
	if a, err := d.Client.Agent(ctx, outsider.ID); err != nil || !a.Live() {
		t.Errorf("outsider after the agent's refused calls: %+v, %v; want it running", a, err)
	}

	// At the door.
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"spawn_agent","arguments":{"name":"intruder","responsible":"x","command":["/bin/true"]}}}`
	post := func(sign func(*http.Request)) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	signWith := func(key ed25519.PrivateKey) func(*http.Request) {
		return func(r *http.Request) {
			if err := httpsig.Sign(r, key, httpsig.Params{Created: time.Now(), JWT: lead.token}); err != nil {
				t.Fatal(err)
			}
		}
	}
	door := []struct {
		what    string
		sign    func(*http.Request)
		sigCode httpsig.Code // "" for a bearer refusal
	}{
		{"no credentials", func(*http.Request) {}, ""},
		{"a wrong operator token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, ""},
		{"lead's token signed by another key", signWith(otherKey), httpsig.CodeInvalidSignature},
		{"a body changed after signing", func(r *http.Request) {
			signWith(lead.signer.Key)(r)
			changed := strings.Replace(body, "intruder", "intrudex", 1)
			r.Body = io.NopCloser(bytes.NewReader([]byte(changed)))
		}, httpsig.CodeInvalidSignature},
		{"a signed body over the MCP limit, refused before the signature is checked", func(r *http.Request) {
			big := strings.Replace(body, `"intruder"`, `"`+strings.Repeat("x", 5<<20)+`"`, 1)
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(big)), int64(len(big))
			signWith(lead.signer.Key)(r)
		}, httpsig.CodeInvalidRequest},
	}
	for _, c := range door {
		resp := post(c.sign)
		got := resp.Header.Get(httpsig.HeaderSignatureError)
		if resp.StatusCode != http.StatusUnauthorized || (c.sigCode != "" && !strings.Contains(got, string(c.sigCode))) {
			t.Errorf("%s: %s, Signature-Error %q; want 401 with %q", c.what, resp.Status, got, c.sigCode)
		}
	}

	// Once lead has ended, its key opens nothing.
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: lead.ID}); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 20*time.Second, "lead to end", func() bool {
		a, err := d.Client.Agent(ctx, lead.ID)
		return err == nil && !a.Live()
	})
	if resp := post(signWith(lead.signer.Key)); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(resp.Header.Get(httpsig.HeaderSignatureError), string(httpsig.CodeRevokedJWT)) {
		t.Errorf("an ended agent's signed request: %s, Signature-Error %q; want 401 revoked_jwt",
			resp.Status, resp.Header.Get(httpsig.HeaderSignatureError))
	}
	if as, err := d.Client.Agents(ctx, kin.AgentFilter{}); err != nil {
		t.Fatal(err)
	} else {
		for _, a := range as {
			if a.Name == "intruder" || a.Name == "intrudex" {
				t.Errorf("a refused request registered %s", a.Name)
			}
		}
	}
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: outsider.ID}); err != nil {
		t.Fatal(err)
	}
}

// bearerTransport sends the operator token with every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
