package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// permScript is a kin.Service whose permission methods a test scripts:
// each records the request it got and answers err when err is set. The
// subject is the plumbing (routes, bodies, statuses, error bodies, the
// SDK), not the decisions, which internal/daemon and internal/policy test.
type permScript struct {
	scripted
	err   error // when set, every permission method answers it
	calls chan any
	inbox func(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error
}

func newPermScript() *permScript { return &permScript{calls: make(chan any, 10)} }

func (s *permScript) Policy(_ context.Context, id kin.AgentID) (*kin.AgentPolicy, error) {
	s.calls <- id
	if s.err != nil {
		return nil, s.err
	}
	return samplePolicy(id), nil
}

func (s *permScript) Authorize(_ context.Context, req kin.AuthorizeRequest) (*kin.Decision, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	if req.Tool == "exec" {
		return &kin.Decision{Allowed: false, Reason: "exec is denied", Rule: "deny exec", Source: kin.SourcePolicy, Agent: 3}, nil
	}
	return &kin.Decision{Allowed: true, Reason: req.Tool + " is allowed"}, nil
}

func (s *permScript) Explain(_ context.Context, req kin.ExplainRequest) (*kin.Explanation, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return sampleExplanation(req), nil
}

func (s *permScript) Usage(_ context.Context, req kin.UsageRequest) (*kin.Spend, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return &kin.Spend{Tokens: req.Tokens, Cost: req.Cost, SubtreeTokens: req.Tokens, SubtreeCost: req.Cost, MaxTokens: ptr(int64(5000))}, nil
}

func (s *permScript) Promote(_ context.Context, req kin.PromoteRequest) (*kin.Agent, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return &kin.Agent{ID: req.Agent, Stage: req.Stage}, nil
}

func (s *permScript) ReadFile(_ context.Context, req kin.ReadRequest) ([]byte, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return []byte("\x00\xff binary\n" + req.Path), nil
}

func (s *permScript) Send(_ context.Context, req kin.SendRequest) (*kin.Message, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return &kin.Message{Seq: 41, From: 0, To: 5, Session: "default", Text: req.Text, At: time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)}, nil
}

func (s *permScript) Inbox(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
	s.calls <- req
	if s.err != nil {
		return s.err
	}
	return s.inbox(ctx, req, fn)
}

func (s *permScript) Register(_ context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	s.calls <- req
	if s.err != nil {
		return nil, s.err
	}
	return &kin.Agent{ID: 9, Name: req.Name, Stage: req.Stage}, nil
}

func ptr[T any](v T) *T { return &v }

func samplePolicy(id kin.AgentID) *kin.AgentPolicy {
	req := &kin.Policy{
		Tools:  &kin.ToolRules{Allow: []string{"read", "web_*"}, Deny: []string{"exec"}},
		Mounts: map[string]kin.Mode{"/work": kin.ModeRO},
		Budget: &kin.Budget{MaxTokens: ptr(int64(5000)), Deadline: ptr(kin.Duration(time.Hour))},
	}
	return &kin.AgentPolicy{
		Agent: id, Stage: "dev", Requested: req,
		Effective: kin.EffectivePolicy{
			Layers: []kin.PolicyLayer{
				{Source: kin.SourceGlobal, Policy: kin.Policy{Tools: &kin.ToolRules{Deny: []string{"sudo"}}}},
				{Source: kin.SourcePreset, Agent: id, Name: "dev", Policy: kin.Policy{}},
				{Source: kin.SourcePolicy, Agent: id, Policy: *req},
			},
			DeadlineAt: time.Date(2026, 3, 30, 13, 0, 0, 0, time.UTC),
			Flat:       kin.Policy{Mounts: map[string]kin.Mode{"/work": kin.ModeRO}},
		},
		Spend: kin.Spend{Tokens: 1200, SubtreeTokens: 1200, MaxTokens: ptr(int64(5000))},
	}
}

func sampleExplanation(req kin.ExplainRequest) *kin.Explanation {
	d := kin.Decision{Allowed: false, Reason: "exec is denied", Rule: "deny exec", Source: kin.SourcePolicy, Agent: 3}
	return &kin.Explanation{Agent: req.Agent, Tool: req.Tool, Path: req.Path, Decision: d,
		Steps: []kin.Decision{{Allowed: true, Reason: "not on the global list", Source: kin.SourceGlobal}, d}}
}

// get sends a GET with the token and returns the response and its body.
func get(t *testing.T, ctx context.Context, url string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// noCalls fails if a request reached the service.
func (s *permScript) noCalls(t *testing.T) {
	t.Helper()
	select {
	case got := <-s.calls:
		t.Errorf("a bad request reached the service: %+v", got)
	default:
	}
}

// wantInvalid checks a 400 invalid answer whose message says want.
func wantInvalid(t *testing.T, what string, status int, body []byte, want string) {
	t.Helper()
	var e kin.Error
	if json.Unmarshal(body, &e); status != http.StatusBadRequest || e.Code != kin.ECodeInvalid || !strings.Contains(e.Message, want) {
		t.Errorf("%s = %d %s; want 400 invalid saying %q", what, status, body, want)
	}
}

// TestPermissionRoutes: each route reaches its method with the request as
// sent, and the SDK reads the answer back as the service gave it.
func TestPermissionRoutes(t *testing.T) {
	svc := newPermScript()
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := c.Policy(ctx, 7)
	if err != nil || !reflect.DeepEqual(p, samplePolicy(7)) {
		t.Errorf("Policy = %+v, %v", p, err)
	}
	if got := <-svc.calls; got != kin.AgentID(7) {
		t.Errorf("Policy asked for %v", got)
	}

	for _, req := range []kin.AuthorizeRequest{
		{Tool: "exec", Input: json.RawMessage(`{"command":"rm -rf /"}`)},
		{Agent: 5, Tool: "read"},
	} {
		d, err := c.Authorize(ctx, req)
		if err != nil || d.Allowed != (req.Tool == "read") || d.Reason == "" {
			t.Errorf("Authorize(%+v) = %+v, %v", req, d, err)
		}
		if got := (<-svc.calls).(kin.AuthorizeRequest); !reflect.DeepEqual(got, req) {
			t.Errorf("Authorize arrived as %+v, want %+v", got, req)
		}
	}
	// A denial is a 200 answer, not an error.
	status, b := post(t, ctx, url+"/v1/authorize", `{"tool":"exec"}`)
	var d kin.Decision
	if err := json.Unmarshal(b, &d); err != nil || status != http.StatusOK || d.Allowed || d.Rule != "deny exec" || d.Agent != 3 {
		t.Errorf("POST /v1/authorize for exec = %d %s", status, b)
	}
	<-svc.calls

	for _, req := range []kin.ExplainRequest{{Agent: 7, Tool: "exec"}, {Agent: 7, Path: "/work/a b&c"}} {
		e, err := c.Explain(ctx, req)
		if err != nil || !reflect.DeepEqual(e, sampleExplanation(req)) {
			t.Errorf("Explain(%+v) = %+v, %v", req, e, err)
		}
		if got := <-svc.calls; got != req {
			t.Errorf("Explain arrived as %+v, want %+v", got, req)
		}
	}

	sp, err := c.Usage(ctx, kin.UsageRequest{Tokens: 1200, Cost: 0.4})
	if err != nil || sp.SubtreeTokens != 1200 || sp.Cost != 0.4 || sp.MaxTokens == nil || *sp.MaxTokens != 5000 {
		t.Errorf("Usage = %+v, %v", sp, err)
	}
	if got := <-svc.calls; got != (kin.UsageRequest{Tokens: 1200, Cost: 0.4}) {
		t.Errorf("Usage arrived as %+v", got)
	}

	a, err := c.Promote(ctx, kin.PromoteRequest{Agent: 7, Stage: "prod"})
	if err != nil || a.ID != 7 || a.Stage != "prod" {
		t.Errorf("Promote = %+v, %v", a, err)
	}
	if got := <-svc.calls; got != (kin.PromoteRequest{Agent: 7, Stage: "prod"}) {
		t.Errorf("Promote arrived as %+v", got)
	}

	data, err := c.ReadFile(ctx, kin.ReadRequest{Reader: 5, Owner: "writer", Path: "memory/notes.md"})
	if err != nil || string(data) != "\x00\xff binary\nmemory/notes.md" {
		t.Errorf("ReadFile = %q, %v", data, err)
	}
	if got := <-svc.calls; got != (kin.ReadRequest{Reader: 5, Owner: "writer", Path: "memory/notes.md"}) {
		t.Errorf("ReadFile arrived as %+v", got)
	}
	// The bytes as they are, not JSON.
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/read", strings.NewReader(`{"owner":"7","path":"SOUL.md"}`))
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" || string(b) != "\x00\xff binary\nSOUL.md" {
		t.Errorf("POST /v1/read = %s, Content-Type %q, body %q", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	<-svc.calls

	m, err := c.Send(ctx, kin.SendRequest{To: "writer", Session: "s2", Text: "hello\nthere"})
	if err != nil || m.Seq != 41 || m.Text != "hello\nthere" || m.To != 5 {
		t.Errorf("Send = %+v, %v", m, err)
	}
	if got := <-svc.calls; got != (kin.SendRequest{To: "writer", Session: "s2", Text: "hello\nthere"}) {
		t.Errorf("Send arrived as %+v", got)
	}
	status, _ = post(t, ctx, url+"/v1/messages", `{"to":"5","text":"x"}`)
	if status != http.StatusCreated {
		t.Errorf("POST /v1/messages = %d, want 201", status)
	}
	<-svc.calls

	for _, path := range []string{"/v1/agents/7/policy", "/v1/agents/7/explain?tool=exec"} {
		resp, b := get(t, ctx, url+path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %s %s", path, resp.Status, b)
		}
		<-svc.calls
	}
}

// TestPermissionBadInput: bad bodies and queries are refused, naming the
// problem, before the service is asked.
func TestPermissionBadInput(t *testing.T) {
	svc := newPermScript()
	_, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/authorize", ``, "empty"},
		{"/v1/authorize", `{"tool":`, "ends too early"},
		{"/v1/authorize", `{"tool":"exec","why":"x"}`, `unknown field "why"`},
		{"/v1/authorize", `{"tool":5}`, `field "tool" must be string`},
		{"/v1/authorize", `{"tool":"exec","agent":"7"}`, `field "agent" must be`},
		{"/v1/authorize", `{"tool":"exec"} {}`, "more than one JSON value"},
		{"/v1/usage", `{"tokens":"12"}`, `field "tokens" must be int64`},
		{"/v1/usage", `{"tokens":1.5}`, `field "tokens" must be int64`},
		{"/v1/usage", `{"tokens":1,"dollars":2}`, `unknown field "dollars"`},
		{"/v1/agents/7/promote", ``, "empty"},
		{"/v1/agents/7/promote", `{"stage":"prod","agent":8}`, `unknown field "agent"`},
		{"/v1/agents/7/promote", `{"stage":1}`, `field "stage" must be string`},
		{"/v1/agents/abc/promote", `{"stage":"prod"}`, "not an agent id"},
		{"/v1/agents/0/promote", `{"stage":"prod"}`, "not an agent id"},
		{"/v1/read", `{"owner":"7","path":"a","as":3}`, `unknown field "as"`},
		{"/v1/read", `{"owner":7,"path":"a"}`, `field "owner" must be string`},
		{"/v1/read", `[]`, "not array"},
		{"/v1/messages", `{"to":"5","text":"x","from":3}`, `unknown field "from"`},
		{"/v1/messages", `{"to":"5","text":["x"]}`, `field "text" must be string`},
		{"/v1/agents", `{"name":"a","responsible":"x","policy":{"tools":{"allow":["read"]},"network":false}}`, `unknown field "network"`},
		{"/v1/agents", `{"name":"a","responsible":"x","policy":{"mounts":["/work"]}}`, `field "policy.mounts" must be`},
		{"/v1/agents", `{"name":"a","responsible":"x","template":{"files":[{"path":"a","bytes":"x"}]}}`, `unknown field "bytes"`},
		{"/v1/agents", `{"name":"a","responsible":"x","stage":7}`, `field "stage" must be string`},
	} {
		status, b := post(t, ctx, url+tc.path, tc.body)
		wantInvalid(t, "POST "+tc.path+" "+tc.body, status, b, tc.want)
	}
	for _, tc := range []struct{ path, want string }{
		{"/v1/agents/7/explain", "tool=NAME or path=PATH"},
		{"/v1/agents/7/explain?tool=exec&path=/work", "not both"},
		{"/v1/agents/7/explain?tool=", "tool is empty"},
		{"/v1/agents/7/explain?path=", "path is empty"},
		{"/v1/agents/7/explain?tool=a&tool=b", `"tool" is given 2 times`},
		{"/v1/agents/7/explain?tool=exec&mode=ro", `unknown query parameter "mode"`},
		{"/v1/agents/abc/explain?tool=exec", "not an agent id"},
		{"/v1/agents/abc/policy", "not an agent id"},
		{"/v1/inbox?agent=0", "not an agent id"},
		{"/v1/inbox?since=-1", "since"},
		{"/v1/inbox?follow=maybe", "follow"},
		{"/v1/inbox?follow=true&follow=false", `"follow" is given 2 times`},
		{"/v1/inbox?session=s2", `unknown query parameter "session"`},
	} {
		resp, b := get(t, ctx, url+tc.path)
		wantInvalid(t, "GET "+tc.path, resp.StatusCode, b, tc.want)
	}
	svc.noCalls(t)
}

// TestPermissionErrorStatuses: the permission authority's codes come with
// their statuses, and the SDK gives back the code and message as sent.
func TestPermissionErrorStatuses(t *testing.T) {
	svc := newPermScript()
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		code   kin.ErrorCode
		status int
	}{
		{kin.ECodeDenied, http.StatusForbidden},
		{kin.ECodeBudget, http.StatusForbidden},
		{kin.ECodeSandbox, http.StatusUnprocessableEntity},
		{kin.ECodeForbidden, http.StatusForbidden},
		{kin.ECodeNotFound, http.StatusNotFound},
	} {
		svc.err = kin.Errorf(tc.code, "refused with %s", tc.code)
		status, b := post(t, ctx, url+"/v1/read", `{"owner":"7","path":"a"}`)
		<-svc.calls
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil || status != tc.status || raw["code"] != string(tc.code) {
			t.Errorf("%s: %d %s, want %d", tc.code, status, b, tc.status)
		}
		if _, ok := raw["excess"]; ok {
			t.Errorf("%s: the body has an excess list: %s", tc.code, b)
		}
		_, err := c.ReadFile(ctx, kin.ReadRequest{Owner: "7", Path: "a"})
		<-svc.calls
		var ke *kin.Error
		var esc *kin.EscalationError
		if !errors.As(err, &ke) || ke.Code != tc.code || ke.Message != "refused with "+string(tc.code) || errors.As(err, &esc) {
			t.Errorf("%s: ReadFile = %#v", tc.code, err)
		}
	}
}

// TestEscalationRoundTrip: an escalation travels with its excess list, and
// the SDK returns a *kin.EscalationError that errors.As finds as such and
// as the *kin.Error inside it.
func TestEscalationRoundTrip(t *testing.T) {
	svc := newPermScript()
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	excess := []kin.Excess{
		{Field: "tools", Asked: "exec", Parent: "read, web_*"},
		{Field: "budget.max_tokens", Asked: "10000", Parent: "5000"},
	}
	msg := "the request asks for more than agent 1 has:\n- tools: exec\n- budget.max_tokens: 10000 > 5000"
	svc.err = kin.Escalationf(excess, "%s", msg)

	status, b := post(t, ctx, url+"/v1/agents/7/promote", `{"stage":"prod"}`)
	<-svc.calls
	var body httpapi.ErrorBody
	if err := json.Unmarshal(b, &body); err != nil || status != http.StatusForbidden || body.Code != kin.ECodeEscalation ||
		body.Message != msg || !reflect.DeepEqual(body.Excess, excess) {
		t.Fatalf("answer %d %s", status, b)
	}

	for name, call := range map[string]func() error{
		"Promote": func() error { _, err := c.Promote(ctx, kin.PromoteRequest{Agent: 7, Stage: "prod"}); return err },
		"Register": func() error {
			_, err := c.Register(ctx, kin.RegisterRequest{Name: "w", Parent: 1, Policy: &kin.Policy{Tools: &kin.ToolRules{Allow: []string{"exec"}}}})
			return err
		},
	} {
		err := call()
		<-svc.calls
		var esc *kin.EscalationError
		if !errors.As(err, &esc) {
			t.Fatalf("%s: %#v is not a *kin.EscalationError", name, err)
		}
		if esc.Err.Code != kin.ECodeEscalation || esc.Err.Message != msg || !reflect.DeepEqual(esc.Excess, excess) {
			t.Errorf("%s: escalation %+v", name, esc)
		}
		var ke *kin.Error
		if !errors.As(err, &ke) || ke.Code != kin.ECodeEscalation || kin.ErrorCodeOf(err) != kin.ECodeEscalation || kin.ErrorMessageOf(err) != msg {
			t.Errorf("%s: the *kin.Error inside is %+v", name, ke)
		}
		if err.Error() != "permission_escalation: "+msg {
			t.Errorf("%s: Error() = %q", name, err.Error())
		}
	}

	// An escalation without items is still one.
	svc.err = kin.Errorf(kin.ECodeEscalation, "too much")
	_, err := c.Promote(ctx, kin.PromoteRequest{Agent: 7, Stage: "prod"})
	<-svc.calls
	var esc *kin.EscalationError
	if !errors.As(err, &esc) || esc.Err.Message != "too much" || len(esc.Excess) != 0 {
		t.Errorf("Promote = %#v", err)
	}
}

// TestInboxStream: without follow the messages there are, then a clean
// end; with follow each as it comes, keep-alives while it is quiet.
func TestInboxStream(t *testing.T) {
	at := time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)
	msgs := []kin.Message{
		{Seq: 12, From: 3, To: 5, Session: "default", Text: "first", At: at},
		{Seq: 15, From: 0, To: 5, Session: "s2", Text: "second\nline", At: at.Add(time.Second)},
	}
	release, quit := make(chan struct{}), make(chan struct{})
	svc := newPermScript()
	svc.inbox = func(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
		for _, m := range msgs {
			if m.Seq <= req.Since {
				continue
			}
			if err := fn(m); err != nil {
				return err
			}
		}
		if !req.Follow {
			return nil
		}
		select {
		case <-release:
			return fn(kin.Message{Seq: 20, From: 3, To: 5, Session: "default", Text: "third", At: at})
		case <-ctx.Done():
			return ctx.Err()
		case <-quit:
			return errors.New("test over")
		}
	}
	srv := httpapi.New(svc, "tok", nil)
	srv.KeepAlive = 10 * time.Millisecond
	ts := httptest.NewServer(srv.Handler(true))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(quit) }) // runs before the server's Close
	c, err := client.New(client.Config{Addr: ts.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var got []kin.Message
	collect := func(m kin.Message) error { got = append(got, m); return nil }
	if err := c.Inbox(ctx, kin.InboxRequest{Agent: 5}, collect); err != nil || !reflect.DeepEqual(got, msgs) {
		t.Fatalf("Inbox = %+v, %v", got, err)
	}
	if r := <-svc.calls; r != (kin.InboxRequest{Agent: 5}) {
		t.Errorf("Inbox arrived as %+v", r)
	}
	got = nil
	if err := c.Inbox(ctx, kin.InboxRequest{Since: 12}, collect); err != nil || !reflect.DeepEqual(got, msgs[1:]) {
		t.Fatalf("Inbox since 12 = %+v, %v", got, err)
	}
	<-svc.calls

	// Raw: NDJSON, one message a line.
	resp, b := get(t, ctx, ts.URL+"/v1/inbox?agent=5")
	<-svc.calls
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || len(lines) != 2 {
		t.Fatalf("GET /v1/inbox: %s %q %q", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	var first kin.Message
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first != msgs[0] {
		t.Errorf("first line %s (%v)", lines[0], err)
	}

	// Follow, raw: the stored messages, keep-alives, the new one.
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/inbox?agent=5&since=12&follow=true", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-svc.calls
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, `"seq":15`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	if line, err = br.ReadString('\n'); err != nil || line != "\n" {
		t.Fatalf("then %q, %v; want a keep-alive", line, err)
	}
	release <- struct{}{}
	for {
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if line != "\n" {
			break
		}
	}
	if !strings.Contains(line, `"seq":20`) {
		t.Errorf("the new message came as %q", line)
	}
	resp.Body.Close()

	// Follow through the SDK, until the caller has had enough.
	fctx, fcancel := context.WithCancel(ctx)
	got = nil
	err = c.Inbox(fctx, kin.InboxRequest{Agent: 5, Follow: true}, func(m kin.Message) error {
		got = append(got, m)
		if len(got) == 3 {
			fcancel()
		} else if len(got) == 2 {
			release <- struct{}{}
		}
		return nil
	})
	fcancel()
	<-svc.calls
	if !errors.Is(err, context.Canceled) || len(got) != 3 || got[2].Seq != 20 {
		t.Errorf("followed %+v, %v", got, err)
	}
}

// TestInboxErrors: a refusal before the first message is a plain error
// answer; one after it comes in the Kin-Error trailer and the SDK returns
// it after the messages it delivered; a followed stream that ends is the
// daemon going away.
func TestInboxErrors(t *testing.T) {
	svc := newPermScript()
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	svc.err = kin.Errorf(kin.ECodeForbidden, "agent 4 is not yours")
	resp, b := get(t, ctx, url+"/v1/inbox?agent=4&follow=true")
	<-svc.calls
	var e kin.Error
	if json.Unmarshal(b, &e); resp.StatusCode != http.StatusForbidden || e.Code != kin.ECodeForbidden || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("refused inbox: %s %s", resp.Status, b)
	}
	err := c.Inbox(ctx, kin.InboxRequest{Agent: 4}, func(kin.Message) error { t.Error("a message"); return nil })
	<-svc.calls
	if kin.ErrorCodeOf(err) != kin.ECodeForbidden || kin.ErrorMessageOf(err) != "agent 4 is not yours" {
		t.Errorf("Inbox = %v", err)
	}

	svc.err = nil
	svc.inbox = func(_ context.Context, _ kin.InboxRequest, fn func(kin.Message) error) error {
		if err := fn(kin.Message{Seq: 3, From: 1, To: 2, Session: "default", Text: "hi"}); err != nil {
			return err
		}
		return kin.Errorf(kin.ECodeUnavailable, "kin is shutting down")
	}
	var n int
	err = c.Inbox(ctx, kin.InboxRequest{Agent: 2, Follow: true}, func(kin.Message) error { n++; return nil })
	<-svc.calls
	if n != 1 || kin.ErrorCodeOf(err) != kin.ECodeUnavailable || kin.ErrorMessageOf(err) != "kin is shutting down" {
		t.Errorf("Inbox = %d messages, %v", n, err)
	}

	svc.inbox = func(context.Context, kin.InboxRequest, func(kin.Message) error) error { return nil }
	err = c.Inbox(ctx, kin.InboxRequest{Agent: 2, Follow: true}, func(kin.Message) error { return nil })
	<-svc.calls
	if kin.ErrorCodeOf(err) != kin.ECodeUnavailable || !strings.Contains(kin.ErrorMessageOf(err), "ended the inbox stream") {
		t.Errorf("a followed inbox that ends: %v", err)
	}
	if err := c.Inbox(ctx, kin.InboxRequest{Agent: 2}, func(kin.Message) error { return nil }); err != nil {
		t.Errorf("an empty inbox: %v", err)
	}
	<-svc.calls

	// fn's own error ends the stream and is returned as it is.
	svc.inbox = func(_ context.Context, _ kin.InboxRequest, fn func(kin.Message) error) error {
		return fn(kin.Message{Seq: 1})
	}
	stop := errors.New("enough")
	if err := c.Inbox(ctx, kin.InboxRequest{Agent: 2}, func(kin.Message) error { return stop }); err != stop {
		t.Errorf("Inbox = %v, want fn's error", err)
	}
	<-svc.calls
}
