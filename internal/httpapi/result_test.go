package httpapi_test

import (
	"bytes"
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

// handoffScript is a kin.Service whose handoff methods a test scripts: the
// subject is the plumbing (bodies, statuses, the SDK's retries), not the
// daemon's results, which internal/daemon tests.
type handoffScript struct {
	scripted
	waits  chan kin.WaitRequest
	wait   func(ctx context.Context, req kin.WaitRequest) (*kin.AgentResult, error)
	spawns chan kin.SpawnRequest
}

func (s *handoffScript) Wait(ctx context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
	if s.waits != nil {
		s.waits <- req
	}
	return s.wait(ctx, req)
}

func (s *handoffScript) Result(_ context.Context, id kin.AgentID) (*kin.AgentResult, error) {
	if id == 99 {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return sampleResult(id), nil
}

func (s *handoffScript) ContextPack(_ context.Context, id kin.AgentID) (*kin.ContextPack, error) {
	if id == 99 {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return &kin.ContextPack{Agent: id, Text: "# Context pack: 0 children\n", Children: json.RawMessage(`[]`)}, nil
}

func (s *handoffScript) Spawn(_ context.Context, req kin.SpawnRequest) (*kin.Agent, error) {
	s.spawns <- req
	return &kin.Agent{ID: 8, Command: req.Command}, nil
}

func sampleResult(id kin.AgentID) *kin.AgentResult {
	return &kin.AgentResult{
		Agent:      &kin.Agent{ID: id, Name: "rev-123", State: kin.StateExited, Result: kin.ResultCompleted},
		Status:     kin.ResultCompleted,
		Dir:        "/ctx/home/1000/agent/lead/session/s1/context/child/rev-123",
		Result:     "Summary: fine\n",
		Refs:       []kin.Ref{{Path: "artifact/notes.md", Hash: "sha256:" + strings.Repeat("0", 64), Kind: "notes"}},
		Violations: []string{},
	}
}

// post sends body to path with the token and returns the status and body.
func post(t *testing.T, ctx context.Context, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
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
	return resp.StatusCode, b
}

// TestWaitBody: the body may be left out; a timeout is passed through as
// given; bad bodies are refused before the service is asked.
func TestWaitBody(t *testing.T) {
	svc := &handoffScript{waits: make(chan kin.WaitRequest, 1), wait: func(_ context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
		return sampleResult(req.ID), nil
	}}
	_, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		body string
		want kin.Duration
	}{
		{"", 0},
		{"{}", 0},
		{`{"timeout":"0s"}`, 0},
		{`{"timeout":"1m30s"}`, kin.Duration(90 * time.Second)},
	} {
		status, b := post(t, ctx, url+"/v1/agents/%237/wait", tc.body)
		if status != http.StatusOK {
			t.Fatalf("wait with body %q: %d %s", tc.body, status, b)
		}
		if got := <-svc.waits; got != (kin.WaitRequest{ID: 7, Timeout: tc.want}) {
			t.Errorf("wait with body %q arrived as %+v", tc.body, got)
		}
		var r kin.AgentResult
		if err := json.Unmarshal(b, &r); err != nil || !reflect.DeepEqual(&r, sampleResult(7)) {
			t.Errorf("answer %s (%v)", b, err)
		}
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/agents/7/wait", `{"timeout":30}`, `a duration is a string like "90s"`},
		{"/v1/agents/7/wait", `{"timeout":"-1s"}`, "negative"},
		{"/v1/agents/7/wait", `{"timeout":"soon"}`, "soon"},
		{"/v1/agents/7/wait", `{"timeout":"1s","grace":"1s"}`, `unknown field "grace"`},
		{"/v1/agents/7/wait", `"30s"`, "not string"},
		{"/v1/agents/0/wait", "", "not an agent id"},
	} {
		status, b := post(t, ctx, url+tc.path, tc.body)
		var e kin.Error
		if json.Unmarshal(b, &e); status != http.StatusBadRequest || e.Code != kin.ECodeInvalid || !strings.Contains(e.Message, tc.want) {
			t.Errorf("POST %s %s = %d %s; want 400 invalid saying %q", tc.path, tc.body, status, b, tc.want)
		}
	}
	select {
	case got := <-svc.waits:
		t.Errorf("a bad request reached the service: %+v", got)
	default:
	}
}

// TestWaitTimeout: the daemon's timeout is a 504 with code timeout, and
// the SDK returns it as is when the caller's own timeout was reached.
func TestWaitTimeout(t *testing.T) {
	svc := &handoffScript{wait: func(_ context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
		return nil, kin.Errorf(kin.ECodeTimeout, "agent %d has not ended within %s", req.ID, time.Duration(req.Timeout))
	}}
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, b := post(t, ctx, url+"/v1/agents/7/wait", `{"timeout":"1s"}`)
	var e kin.Error
	if err := json.Unmarshal(b, &e); err != nil || status != http.StatusGatewayTimeout || e.Code != kin.ECodeTimeout {
		t.Fatalf("answer %d %s, want 504 timeout", status, b)
	}
	_, err := c.Wait(ctx, kin.WaitRequest{ID: 7, Timeout: kin.Duration(time.Second)})
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeTimeout || ke.Message != "agent 7 has not ended within 1s" {
		t.Fatalf("Wait = %v, want the daemon's timeout", err)
	}
}

// TestWaitAsksAgain: one request waits at most kin.MaxWait; without a
// timeout, or with a longer one, the SDK asks again after the daemon's
// timeout, and returns other errors at once.
func TestWaitAsksAgain(t *testing.T) {
	answers := make(chan error, 10) // the service's answers, in order: nil for the result
	svc := &handoffScript{waits: make(chan kin.WaitRequest, 10), wait: func(_ context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
		if err := <-answers; err != nil {
			return nil, err
		}
		return sampleResult(req.ID), nil
	}}
	c, _ := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notYet := kin.Errorf(kin.ECodeTimeout, "not yet")

	answers <- notYet
	answers <- notYet
	answers <- nil
	r, err := c.Wait(ctx, kin.WaitRequest{ID: 7})
	if err != nil || !reflect.DeepEqual(r, sampleResult(7)) {
		t.Fatalf("Wait = %+v, %v", r, err)
	}
	for i := range 3 {
		if got := <-svc.waits; got != (kin.WaitRequest{ID: 7}) {
			t.Errorf("request %d: %+v, want no timeout", i+1, got)
		}
	}

	answers <- notYet
	answers <- nil
	if _, err := c.Wait(ctx, kin.WaitRequest{ID: 7, Timeout: kin.Duration(kin.MaxWait + time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := <-svc.waits; got.Timeout <= 0 || time.Duration(got.Timeout) > kin.MaxWait {
			t.Errorf("request %d asked for %s, want at most %s", i+1, time.Duration(got.Timeout), kin.MaxWait)
		}
	}

	answers <- kin.Errorf(kin.ECodeNotFound, "agent 7 not found")
	if _, err := c.Wait(ctx, kin.WaitRequest{ID: 7}); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Fatalf("Wait = %v, want not_found", err)
	}
	<-svc.waits
	select {
	case got := <-svc.waits:
		t.Errorf("asked again after not_found: %+v", got)
	default:
	}
}

// TestWaitOutlivesWriteTimeout: a server with a write timeout (here 1ns,
// past before any handler runs) cuts ordinary answers, but not a wait's.
func TestWaitOutlivesWriteTimeout(t *testing.T) {
	svc := &handoffScript{wait: func(_ context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
		return sampleResult(req.ID), nil
	}}
	ts := httptest.NewUnstartedServer(httpapi.New(svc, "tok", nil).Handler(true))
	ts.Config.WriteTimeout = time.Nanosecond
	ts.Start()
	t.Cleanup(ts.Close)
	c, err := client.New(client.Config{Addr: ts.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Result(ctx, 7); err == nil {
		t.Fatal("the write timeout is not in force: this test shows nothing")
	}
	r, err := c.Wait(ctx, kin.WaitRequest{ID: 7})
	if err != nil || r.Agent.ID != 7 {
		t.Fatalf("Wait = %+v, %v; the write timeout cut it", r, err)
	}
}

func TestResultAndContextPack(t *testing.T) {
	svc := &handoffScript{}
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	r, err := c.Result(ctx, 7)
	if err != nil || !reflect.DeepEqual(r, sampleResult(7)) {
		t.Fatalf("Result = %+v, %v", r, err)
	}
	p, err := c.ContextPack(ctx, 7)
	if err != nil || p.Agent != 7 || p.Text != "# Context pack: 0 children\n" || string(p.Children) != "[]" {
		t.Fatalf("ContextPack = %+v, %v", p, err)
	}
	for _, path := range []string{"/v1/agents/7/result", "/v1/agents/7/context-pack"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %s, Content-Type %q", path, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
	if _, err := c.Result(ctx, 99); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Errorf("Result(99) = %v, want not_found", err)
	}
	if _, err := c.ContextPack(ctx, 99); kin.ErrorCodeOf(err) != kin.ECodeNotFound {
		t.Errorf("ContextPack(99) = %v, want not_found", err)
	}
}

// TestSpawnHandoffBody: a spawn's handoff is decoded as strictly as the
// rest of the body (unknown keys refused, inside refs too), while the
// contract passes through as the raw JSON given: the daemon reads it with
// the handoff package's own strict parser. The policy is the spawn's own
// (RegisterRequest.Policy), no longer a part of the handoff.
func TestSpawnHandoffBody(t *testing.T) {
	svc := &handoffScript{spawns: make(chan kin.SpawnRequest, 1)}
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	h := &kin.Handoff{
		Task:     "Review the mount spec.\n",
		Refs:     []kin.Ref{{Path: "/work/spec.md", Hash: "sha256:" + strings.Repeat("a", 64)}},
		Contract: json.RawMessage(`{"sections":[{"name":"Summary"},{"name":"Findings"}],"unlisted_artifacts":"reject"}`),
	}
	if _, err := c.Spawn(ctx, kin.SpawnRequest{Command: []string{"/bin/true"}, Handoff: h}); err != nil {
		t.Fatal(err)
	}
	if got := <-svc.spawns; !reflect.DeepEqual(got.Handoff, h) {
		t.Errorf("handoff arrived as %+v, want %+v", got.Handoff, h)
	}

	for _, tc := range []struct{ name, handoff, want string }{
		{"unknown key", `{"task":"x","tasks":"y"}`, `unknown field "tasks"`},
		{"unknown key in a ref", `{"task":"x","refs":[{"path":"/a","sha":"y"}]}`, `unknown field "sha"`},
		{"task a number", `{"task":5}`, `field "handoff.task" must be string`},
		{"ref path a number", `{"task":"x","refs":[{"path":5}]}`, `field "handoff.refs.path" must be string`},
		{"refs an object", `{"task":"x","refs":{"path":"/a"}}`, `field "handoff.refs" must be`},
		{"not an object", `"review it"`, `field "handoff" must be`},
		{"a policy in the handoff", `{"task":"x","policy":{"network":false}}`, `unknown field "policy"`},
		{"mounts in the handoff", `{"task":"x","mounts":{"/work":"ro"}}`, `unknown field "mounts"`},
	} {
		status, b := post(t, ctx, url+"/v1/spawn", `{"command":["/bin/true"],"handoff":`+tc.handoff+`}`)
		var e kin.Error
		if json.Unmarshal(b, &e); status != http.StatusBadRequest || e.Code != kin.ECodeInvalid || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s; want 400 invalid saying %q", tc.name, status, b, tc.want)
		}
	}
	select {
	case got := <-svc.spawns:
		t.Errorf("a bad spawn reached the service: %+v", got)
	default:
	}
}

// TestDecodeSpawnHandoff holds the decoder to the same rules without a
// server: a nested handoff round-trips, and its raw parts keep their bytes.
func TestDecodeSpawnHandoff(t *testing.T) {
	body := `{"name":"rev-123","command":["/bin/true"],"handoff":{"task":"t","contract":{"version":1,"sections":[{"name":"a"}]}}}`
	var req kin.SpawnRequest
	if err := httpapi.DecodeJSON(strings.NewReader(body), &req); err != nil {
		t.Fatal(err)
	}
	h := req.Handoff
	if h == nil || h.Task != "t" || string(h.Contract) != `{"version":1,"sections":[{"name":"a"}]}` {
		t.Fatalf("handoff = %+v", h)
	}
	again, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back kin.SpawnRequest
	if err := httpapi.DecodeJSON(bytes.NewReader(again), &back); err != nil || !reflect.DeepEqual(back.Handoff, h) {
		t.Fatalf("round trip: %s -> %+v, %v", again, back.Handoff, err)
	}
}
