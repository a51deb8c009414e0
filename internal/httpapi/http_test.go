package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// api talks to a real daemon's TCP listener with net/http alone.
type api struct {
	t     *testing.T
	d     *kintest.Daemon
	base  string
	token string
}

func startAPI(t *testing.T, opts ...kintest.Option) *api {
	t.Helper()
	d := kintest.StartDaemon(t, append([]kintest.Option{kintest.WithHTTP()}, opts...)...)
	return &api{t: t, d: d, base: "http://" + d.HTTPAddr(), token: d.OperatorToken()}
}

// request sends one request; auth is the Authorization header ("" for none).
func (a *api) request(ctx context.Context, method, path, auth string, body []byte, header ...string) *http.Response {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call sends a request with the operator token and reads the whole answer.
func (a *api) call(method, path string, body []byte) (*http.Response, []byte) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := a.request(ctx, method, path, "Bearer "+a.token, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp, b
}

// callJSON sends v as JSON and expects want; it decodes the answer into out.
func (a *api) callJSON(method, path string, v any, want int, out any) *http.Response {
	a.t.Helper()
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			a.t.Fatal(err)
		}
	}
	resp, b := a.call(method, path, body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s = %s %s, want %d", method, path, resp.Status, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp
}

func (a *api) register(req kin.RegisterRequest) *kin.Agent {
	a.t.Helper()
	var ag kin.Agent
	a.callJSON("POST", "/v1/agents", req, http.StatusCreated, &ag)
	return &ag
}

func (a *api) agentCount() int {
	a.t.Helper()
	var agents []*kin.Agent
	a.callJSON("GET", "/v1/agents", nil, http.StatusOK, &agents)
	return len(agents)
}

// readError checks that resp is a JSON kin error with the given status and
// code, and returns it.
func readError(t *testing.T, resp *http.Response, body []byte, status int, code kin.ErrorCode) *kin.Error {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %s, want %d (body %s)", resp.Status, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e kin.Error
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q is not a kin error: %v", body, err)
	}
	if e.Code != code || e.Message == "" {
		t.Errorf("error = %+v, want code %q and a message", e, code)
	}
	return &e
}

func TestAuth(t *testing.T) {
	a := startAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, auth string
		want       int
		message    string
	}{
		{"no token", "", http.StatusUnauthorized, "needs the operator token"},
		{"wrong token", "Bearer " + strings.Repeat("0", len(a.token)), http.StatusUnauthorized, "wrong"},
		{"empty token", "Bearer ", http.StatusUnauthorized, "needs the operator token"}, // the trailing space is trimmed in transit
		{"token as a prefix", "Bearer " + a.token + "x", http.StatusUnauthorized, "wrong"},
		{"other scheme", "Basic " + a.token, http.StatusUnauthorized, "needs the operator token"},
		{"bare token", a.token, http.StatusUnauthorized, "needs the operator token"},
		{"right token", "Bearer " + a.token, http.StatusOK, ""},
		{"scheme in lower case", "bearer " + a.token, http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := a.request(ctx, "GET", "/v1/status", tc.auth, nil)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == http.StatusOK {
				var st kin.DaemonStatus
				if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil || st.Version != "test" {
					t.Fatalf("GET /v1/status = %s %s", resp.Status, body)
				}
				return
			}
			e := readError(t, resp, body, tc.want, kin.ECodeUnauthorized)
			if !strings.Contains(e.Message, tc.message) {
				t.Errorf("message %q does not say %q", e.Message, tc.message)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="kin"` {
				t.Errorf("WWW-Authenticate = %q", got)
			}
		})
	}
	// Unknown routes are behind the token check too: nothing is revealed.
	resp := a.request(ctx, "GET", "/v1/nothing-here", "", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	readError(t, resp, body, http.StatusUnauthorized, kin.ECodeUnauthorized)
}

func TestUnknownRoutes(t *testing.T) {
	a := startAPI(t)
	for _, tc := range []struct {
		method, path string
		status       int
		code         kin.ErrorCode
	}{
		{"GET", "/v1/nothing-here", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v2/agents", http.StatusNotFound, kin.ECodeNotFound}, // past the dashboard's own paths ("/" is its page)
		{"DELETE", "/v1/agents", http.StatusNotFound, kin.ECodeNotFound},
		{"POST", "/v1/tree", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/1/cousins", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/99", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/99/tree", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/abc", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/0/children", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents?colour=red", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/events?since=-1", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/events?follow=true&limit=10001", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/spawn", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/1/stop", http.StatusNotFound, kin.ECodeNotFound},
		{"POST", "/v1/whoami", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/heartbeat", http.StatusNotFound, kin.ECodeNotFound},
		{"POST", "/v1/agents/0/stop", http.StatusBadRequest, kin.ECodeInvalid},
		{"POST", "/v1/agents/abc/stop", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/abc/logs", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/logs?colour=red", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/logs?offset=-1", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/logs?offset=x", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/logs?follow=maybe", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/logs?follow=true&follow=false", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/99/logs", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/authorize", http.StatusNotFound, kin.ECodeNotFound},
		{"POST", "/v1/agents/1/policy", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/1/promote", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/read", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/messages", http.StatusNotFound, kin.ECodeNotFound},
		{"POST", "/v1/inbox", http.StatusNotFound, kin.ECodeNotFound},
		{"GET", "/v1/agents/abc/policy", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/0/explain?tool=exec", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/explain", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/explain?tool=exec&path=/work", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/agents/1/explain?colour=red", http.StatusBadRequest, kin.ECodeInvalid},
		{"POST", "/v1/agents/abc/promote", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/inbox?agent=abc", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/inbox?since=x", http.StatusBadRequest, kin.ECodeInvalid},
		{"GET", "/v1/inbox?colour=red", http.StatusBadRequest, kin.ECodeInvalid},
	} {
		resp, body := a.call(tc.method, tc.path, nil)
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			e := readError(t, resp, body, tc.status, tc.code)
			if tc.status == http.StatusNotFound && tc.code == kin.ECodeNotFound && !strings.Contains(tc.path, "99") &&
				!strings.Contains(e.Message, tc.method+" "+tc.path) {
				t.Errorf("message %q does not name the request", e.Message)
			}
		})
	}
}

func TestBadJSONBodies(t *testing.T) {
	a := startAPI(t)
	huge := []byte(`{"name":"big","responsible":"x","scope":"` + strings.Repeat("a", httpapi.MaxBodySize) + `"}`)
	for _, tc := range []struct {
		name, path string
		body       []byte
		want       string // in the message
	}{
		{"syntax error", "/v1/agents", []byte(`{"name": }`), "syntax error at byte 10"},
		{"unknown field", "/v1/agents", []byte(`{"name":"a","responsible":"x","nickname":"b"}`), `unknown field "nickname"`},
		{"wrong type", "/v1/agents", []byte(`{"name":5,"responsible":"x"}`), `field "name" must be string, not number`},
		{"wrong type for parent", "/v1/agents", []byte(`{"name":"a","parent":"1"}`), `field "parent" must be`},
		{"not an object", "/v1/agents", []byte(`["a"]`), "not array"},
		{"trailing data", "/v1/agents", []byte(`{"name":"a","responsible":"x"} {"name":"b","responsible":"x"}`), "more than one JSON value"},
		{"trailing garbage", "/v1/agents", []byte(`{"name":"a","responsible":"x"}}`), "more than one JSON value"},
		{"cut short", "/v1/agents", []byte(`{"name":"a"`), "ends too early"},
		{"empty body", "/v1/agents", []byte{}, "empty"},
		{"blank body", "/v1/agents", []byte(" \n\t"), "empty"},
		{"body over 1 MiB", "/v1/agents", huge, "larger than 1048576 bytes"},
		{"valid JSON, invalid request", "/v1/agents", []byte(`{"name":"no spaces allowed","responsible":"x"}`), "not allowed"},
		{"status: unknown field", "/v1/agents/1/status", []byte(`{"action":"suspend","force":true}`), `unknown field "force"`},
		{"status: wrong type", "/v1/agents/1/status", []byte(`{"action":"suspend","cascade":"yes"}`), `field "cascade" must be bool`},
		{"governor: empty body", "/v1/governor/settings", nil, "empty"},
		{"governor: wrong type", "/v1/governor/settings", []byte(`{"key":"max_children","value":5}`), `field "value" must be string`},
		{"spawn: empty body", "/v1/spawn", nil, "empty"},
		{"spawn: unknown field", "/v1/spawn", []byte(`{"command":["/bin/true"],"argv":["x"]}`), `unknown field "argv"`},
		{"spawn: command not a list", "/v1/spawn", []byte(`{"command":"/bin/true"}`), `field "command" must be []string`},
		{"spawn: env not a list", "/v1/spawn", []byte(`{"command":["/bin/true"],"env":{"A":"1"}}`), `field "env" must be []string`},
		{"spawn: grace a number", "/v1/spawn", []byte(`{"command":["/bin/true"],"grace":5}`), `a duration is a string like "90s"`},
		{"spawn: grace negative", "/v1/spawn", []byte(`{"command":["/bin/true"],"grace":"-1s"}`), "negative"},
		{"spawn: grace not a duration", "/v1/spawn", []byte(`{"command":["/bin/true"],"grace":"soon"}`), "soon"},
		{"spawn: parent a string", "/v1/spawn", []byte(`{"command":["/bin/true"],"parent":"1"}`), `field "parent" must be`},
		{"spawn: trailing data", "/v1/spawn", []byte(`{"command":["/bin/true"]} {}`), "more than one JSON value"},
		{"stop: unknown field", "/v1/agents/1/stop", []byte(`{"grace":"1s","force":true}`), `unknown field "force"`},
		{"stop: grace a number", "/v1/agents/1/stop", []byte(`{"grace":0}`), `a duration is a string like "90s"`},
		{"stop: grace negative", "/v1/agents/1/stop", []byte(`{"grace":"-5s"}`), "negative"},
		{"stop: not an object", "/v1/agents/1/stop", []byte(`"5s"`), "not string"},
		{"heartbeat: empty body", "/v1/heartbeat", nil, "empty"},
		{"heartbeat: unknown field", "/v1/heartbeat", []byte(`{"cursor":"a","seq":1}`), `unknown field "seq"`},
		{"heartbeat: id a string", "/v1/heartbeat", []byte(`{"id":"7"}`), `field "id" must be`},
		{"heartbeat: cursor a number", "/v1/heartbeat", []byte(`{"cursor":42}`), `field "cursor" must be string`},
		{"register: unknown policy key", "/v1/agents", []byte(`{"name":"a","responsible":"x","policy":{"network":false}}`), `unknown field "network"`},
		{"register: mode a number", "/v1/agents", []byte(`{"name":"a","responsible":"x","policy":{"mounts":{"/work":1}}}`), `field "policy.mounts" must be`},
		{"spawn: unknown budget key", "/v1/spawn", []byte(`{"command":["/bin/true"],"policy":{"budget":{"tokens":5}}}`), `unknown field "tokens"`},
		{"spawn: policy in the handoff", "/v1/spawn", []byte(`{"command":["/bin/true"],"handoff":{"task":"t","policy":{}}}`), `unknown field "policy"`},
		{"authorize: empty body", "/v1/authorize", nil, "empty"},
		{"authorize: unknown field", "/v1/authorize", []byte(`{"tool":"exec","args":"x"}`), `unknown field "args"`},
		{"usage: cost a string", "/v1/usage", []byte(`{"cost":"0.4"}`), `field "cost" must be float64`},
		{"promote: empty body", "/v1/agents/1/promote", nil, "empty"},
		{"promote: unknown field", "/v1/agents/1/promote", []byte(`{"stage":"prod","force":true}`), `unknown field "force"`},
		{"read: syntax error", "/v1/read", []byte(`{"owner":}`), "syntax error"},
		{"send: unknown field", "/v1/messages", []byte(`{"to":"1","text":"x","urgent":true}`), `unknown field "urgent"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := a.call("POST", tc.path, tc.body)
			e := readError(t, resp, body, http.StatusBadRequest, kin.ECodeInvalid)
			if !strings.Contains(e.Message, tc.want) {
				t.Errorf("message %q does not say %q", e.Message, tc.want)
			}
		})
	}
	if n := a.agentCount(); n != 0 {
		t.Fatalf("%d agents were registered by bad requests", n)
	}
	var g kin.GovernorInfo
	a.callJSON("GET", "/v1/governor", nil, http.StatusOK, &g)
	if len(g.Overrides) != 0 {
		t.Fatalf("bad requests changed the governor: %v", g.Overrides)
	}
}

func TestRegisterThenGetLocation(t *testing.T) {
	a := startAPI(t)
	var created kin.Agent
	resp := a.callJSON("POST", "/v1/agents", kin.RegisterRequest{Name: "coordinator", Responsible: "Dr. Schmidt", Wallet: "0xabc"}, http.StatusCreated, &created)
	loc := resp.Header.Get("Location")
	if loc != "/v1/agents/"+created.ID.String() {
		t.Fatalf("Location = %q for agent %d", loc, created.ID)
	}
	var got kin.Agent
	a.callJSON("GET", loc, nil, http.StatusOK, &got)
	if got.ID != created.ID || got.Name != "coordinator" || got.Responsible != "Dr. Schmidt" || got.Wallet != "0xabc" ||
		got.Status != kin.StatusActive || got.Life != kin.LifeOwned || !got.CreatedAt.Equal(created.CreatedAt) {
		t.Fatalf("GET %s = %+v, POST answered %+v", loc, got, created)
	}
	// The '#' form of an id (seed 000's "Agent #7") works in paths too.
	a.callJSON("GET", "/v1/agents/%23"+created.ID.String(), nil, http.StatusOK, &got)

	child := a.register(kin.RegisterRequest{Name: "collector", Parent: created.ID})
	var tree []kin.TreeNode
	a.callJSON("GET", "/v1/tree", nil, http.StatusOK, &tree)
	if len(tree) != 1 || len(tree[0].Children) != 1 || tree[0].Children[0].ID != child.ID {
		t.Fatalf("tree = %+v", tree)
	}
	var roots []*kin.Agent
	a.callJSON("GET", "/v1/agents?parent=0", nil, http.StatusOK, &roots)
	if len(roots) != 1 || roots[0].ID != created.ID {
		t.Fatalf("roots = %+v", roots)
	}
}

// TestRuleRejectionStatuses drives a real rejection for each governor rule
// and checks that it answers the documented status.
func TestRuleRejectionStatuses(t *testing.T) {
	check := func(t *testing.T, a *api, req kin.RegisterRequest, code kin.ErrorCode, status int) *http.Response {
		t.Helper()
		if httpapi.StatusOf(code) != status {
			t.Fatalf("StatusOf(%s) = %d; this test documents %d", code, httpapi.StatusOf(code), status)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := a.call("POST", "/v1/agents", b)
		readError(t, resp, body, status, code)
		return resp
	}

	t.Run("default profile", func(t *testing.T) {
		a := startAPI(t)
		root := a.register(kin.RegisterRequest{Name: "root", Responsible: "ops", Wallet: "w1"})
		check(t, a, kin.RegisterRequest{Name: "orphan", Parent: 99}, kin.ECodeParentNotFound, http.StatusUnprocessableEntity)
		check(t, a, kin.RegisterRequest{Name: "twin", Responsible: "ops", Wallet: "w1"}, kin.ECodeWalletTaken, http.StatusConflict)
		check(t, a, kin.RegisterRequest{Name: "root", Responsible: "ops"}, kin.ECodeConflict, http.StatusConflict)

		// Resuming an active agent is not a transition.
		resp, body := a.call("POST", "/v1/agents/"+root.ID.String()+"/status", []byte(`{"action":"resume"}`))
		readError(t, resp, body, http.StatusConflict, kin.ECodeInvalidTransition)
		resp, body = a.call("POST", "/v1/agents/99/status", []byte(`{"action":"suspend"}`))
		readError(t, resp, body, http.StatusNotFound, kin.ECodeNotFound)
		resp, body = a.call("POST", "/v1/agents/"+root.ID.String()+"/status", []byte(`{"action":"pause"}`))
		readError(t, resp, body, http.StatusBadRequest, kin.ECodeInvalid)

		// A suspended parent may not spawn.
		var changed []*kin.Agent
		a.callJSON("POST", "/v1/agents/"+root.ID.String()+"/status", httpapi.StatusBody{Action: kin.ActionSuspend}, http.StatusOK, &changed)
		if len(changed) != 1 || changed[0].Status != kin.StatusSuspended {
			t.Fatalf("suspend changed %+v", changed)
		}
		check(t, a, kin.RegisterRequest{Name: "kid", Parent: root.ID}, kin.ECodeParentNotActive, http.StatusConflict)
		a.callJSON("POST", "/v1/agents/"+root.ID.String()+"/status", httpapi.StatusBody{Action: kin.ActionResume}, http.StatusOK, nil)

		// The operator lowers max_children at runtime.
		var g kin.GovernorInfo
		a.callJSON("POST", "/v1/governor/settings", httpapi.GovernorSettingBody{Key: "max_children", Value: "1"}, http.StatusOK, &g)
		if g.Profile.MaxChildren != 1 || g.Overrides["max_children"] != "1" {
			t.Fatalf("governor after set = %+v", g)
		}
		a.register(kin.RegisterRequest{Name: "kid", Parent: root.ID})
		check(t, a, kin.RegisterRequest{Name: "kid2", Parent: root.ID}, kin.ECodeMaxChildren, http.StatusConflict)
		resp, body = a.call("POST", "/v1/governor/settings", []byte(`{"key":"max_wives","value":"3"}`))
		readError(t, resp, body, http.StatusBadRequest, kin.ECodeInvalid)
	})

	t.Run("aauth profile", func(t *testing.T) {
		a := startAPI(t, kintest.WithProfile("aauth"))
		root := a.register(kin.RegisterRequest{Name: "agent", Responsible: "ops"})
		sub := a.register(kin.RegisterRequest{Name: "sub", Parent: root.ID})
		// Sub-agents must not spawn their own: the grandchild is too deep.
		// The profile's breaker opens after more than 10 such rejections.
		for i := range 11 {
			check(t, a, kin.RegisterRequest{Name: "grandchild" + strconv.Itoa(i), Parent: sub.ID}, kin.ECodeSpawnDepth, http.StatusForbidden)
		}
		resp := check(t, a, kin.RegisterRequest{Name: "grandchild", Parent: sub.ID}, kin.ECodeCircuitOpen, http.StatusTooManyRequests)
		if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n <= 0 {
			t.Errorf("Retry-After = %q, want seconds", resp.Header.Get("Retry-After"))
		}
		var rejected []kin.Event
		a.callJSON("GET", "/v1/events?type=spawn.rejected&agent="+sub.ID.String(), nil, http.StatusOK, &rejected)
		if len(rejected) != 12 {
			t.Fatalf("%d spawn.rejected events, want 12", len(rejected))
		}
		if n := a.agentCount(); n != 2 {
			t.Fatalf("%d agents, want 2", n)
		}
	})

	t.Run("hierarchy profile", func(t *testing.T) {
		a := startAPI(t, kintest.WithProfile("hierarchy"))
		check(t, a, kin.RegisterRequest{Name: "Worker-1", Responsible: "ops"}, kin.ECodeSpawnNotAllowed, http.StatusForbidden)
		a.register(kin.RegisterRequest{Name: "GO", Responsible: "ops"})
		check(t, a, kin.RegisterRequest{Name: "GO", Role: "GO", Responsible: "ops"}, kin.ECodeCardinality, http.StatusConflict)
	})
}

// eventStream opens GET /v1/events?follow=true with accept; its body ends
// when ctx does.
func (a *api) eventStream(ctx context.Context, query, accept string) *http.Response {
	a.t.Helper()
	resp := a.request(ctx, "GET", "/v1/events?follow=true"+query, "Bearer "+a.token, nil, "Accept", accept)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.t.Fatalf("follow = %s %s", resp.Status, b)
	}
	a.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// awaitRegistered reads events from next until the agent.registered event
// of id arrives; next fails the test when the stream ends or ctx expires.
func awaitRegistered(t *testing.T, next func() kin.Event, id kin.AgentID) kin.Event {
	t.Helper()
	for {
		e := next()
		if e.Type == kin.EventAgentRegistered && e.Agent == id {
			return e
		}
	}
}

func TestEventsFollowNDJSON(t *testing.T) {
	a := startAPI(t)
	first := a.register(kin.RegisterRequest{Name: "first", Responsible: "ops"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := a.eventStream(ctx, "", "application/x-ndjson")
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	lastSeq := int64(0)
	next := func() kin.Event {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("the stream ended before the event arrived: %v (ctx: %v)", sc.Err(), ctx.Err())
		}
		var e kin.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		if e.Seq <= lastSeq {
			t.Fatalf("seq %d after %d", e.Seq, lastSeq)
		}
		lastSeq = e.Seq
		return e
	}
	// The stream has started once it delivers what was stored; what is
	// registered from now on must arrive live.
	awaitRegistered(t, next, first.ID)
	second := a.register(kin.RegisterRequest{Name: "second", Parent: first.ID})
	e := awaitRegistered(t, next, second.ID)
	var name string
	if err := e.Field("name", &name); err != nil || name != "second" || e.Parent != first.ID {
		t.Fatalf("event = %+v (name %q, %v)", e, name, err)
	}
	if e := next(); e.Type != kin.EventChildSpawned || e.Parent != first.ID || e.Agent != second.ID {
		t.Fatalf("after agent.registered came %+v, want agent.child.spawned", e)
	}
}

func TestEventsFollowSSE(t *testing.T) {
	a := startAPI(t)
	first := a.register(kin.RegisterRequest{Name: "first", Responsible: "ops"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := a.eventStream(ctx, "&type="+kin.EventAgentRegistered, "text/event-stream")
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q", cc)
	}
	rd := bufio.NewReader(resp.Body)
	line := func() string {
		t.Helper()
		s, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the event arrived: %v (ctx: %v)", err, ctx.Err())
		}
		return strings.TrimSuffix(s, "\n")
	}
	next := func() kin.Event {
		t.Helper()
		var id, typ, data string
		for l := line(); l != ""; l = line() {
			field, value, ok := strings.Cut(l, ": ")
			if !ok {
				t.Fatalf("SSE line %q is not \"field: value\"", l)
			}
			switch field {
			case "id":
				id = value
			case "event":
				typ = value
			case "data":
				data = value
			default:
				t.Fatalf("unexpected SSE field %q", l)
			}
		}
		var e kin.Event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("data %q: %v", data, err)
		}
		if id != strconv.FormatInt(e.Seq, 10) || typ != e.Type {
			t.Fatalf("SSE id %q, event %q for data %s", id, typ, data)
		}
		if e.Type != kin.EventAgentRegistered {
			t.Fatalf("the type filter let %s through", e.Type)
		}
		return e
	}
	awaitRegistered(t, next, first.ID)
	second := a.register(kin.RegisterRequest{Name: "second", Parent: first.ID})
	awaitRegistered(t, next, second.ID)
}

func TestEventsFollowWithLimitEnds(t *testing.T) {
	a := startAPI(t)
	for i := range 3 {
		a.register(kin.RegisterRequest{Name: fmt.Sprintf("agent%d", i), Responsible: "ops"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := a.eventStream(ctx, "&since=1&limit=2", "")
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream did not end after its limit: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `{"seq":2,`) || !strings.HasPrefix(lines[1], `{"seq":3,`) {
		t.Fatalf("stream = %q, want events 2 and 3", body)
	}

	var evs []kin.Event
	a.callJSON("GET", "/v1/events?type=agent.registered&type=agent.status", nil, http.StatusOK, &evs)
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
}
