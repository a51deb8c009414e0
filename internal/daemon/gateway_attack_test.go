package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// Attacks on the model gateway by an agent that wants more than it was
// given (notes: /work/notes-s3-gwattack.md has the ones that failed).

// TestModelGatewayAttackDenyListByUpstreamPrefix: a model denied by name
// is denied too when the agent names it through its upstream
// ("openai/gpt-4o-mini" reaches the upstream as "gpt-4o-mini"), in
// another case, or with whitespace around it.
func TestModelGatewayAttackDenyListByUpstreamPrefix(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	a, err := sh(t, d, "sly", 0, &kin.Policy{Models: &kin.ToolRules{Deny: []string{"gpt-4o-mini"}}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	for _, model := range []string{"gpt-4o-mini", "openai/gpt-4o-mini", " gpt-4o-mini", "gpt-4o-mini\n", "openai/ gpt-4o-mini", "GPT-4o-Mini", "openai/GPT-4O-MINI"} {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
		if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, body); code != 403 && code != 400 {
			t.Errorf("model %q denied by name: %d %s", model, code, b)
		}
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d calls to a denied model reached the upstream", n)
	}
	// An allowed model named through its upstream costs what it costs
	// under its own name (gpt-4o-mini: 1 and 2 per million).
	free, err := sh(t, d, "free", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, b := modelCall(t, d, "/v1/chat/completions", d.ModelCredential(free.ID), `{"model":"openai/gpt-4o-mini","messages":[]}`); code != 200 {
		t.Fatalf("openai/gpt-4o-mini: %d %s", code, b)
	}
	if s := spendOf(t, d, free.ID); s.Tokens != 15 || math.Abs(s.Cost-20e-6) > 1e-12 {
		t.Fatalf("openai/gpt-4o-mini was metered %d tokens costing %v, want 15 costing 2e-05", s.Tokens, s.Cost)
	}
}

// TestModelGatewayAttackAbandonedStream: an agent that reads a chat
// stream's content and hangs up before the usage chunk (the last) is
// metered all the same: kin reads the upstream's stream to its end.
func TestModelGatewayAttackAbandonedStream(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, Reply: "hello world", Chunks: 4, ChunkDelay: 20 * time.Millisecond})
	a, err := sh(t, d, "leaver", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	req, _ := http.NewRequest("POST", "http://"+d.HTTPAddr()+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := clientFor(d, cred).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before any content: %v", err)
		}
		if strings.Contains(line, `"content"`) {
			break
		}
	}
	resp.Body.Close() // gone, with the content, before the usage
	var got []kin.ModelCallData
	kintest.WaitFor(t, 10*time.Second, "the abandoned call to be recorded", func() bool {
		got = modelCalls(t, d)
		return len(got) == 1
	})
	if s := spendOf(t, d, a.ID); s.Tokens != 15 || got[0].Tokens != 15 {
		t.Fatalf("an abandoned stream was metered %d tokens (%+v), the upstream's usage says 15", s.Tokens, got[0])
	}
}

// TestModelGatewayAttackConcurrentCallsOneAgent: one agent starting many
// calls together when one call's worth is left spends at most one call
// past its budget: calls in flight hold what they may spend.
func TestModelGatewayAttackConcurrentCallsOneAgent(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, Reply: "hello world", Chunks: 4, ChunkDelay: 50 * time.Millisecond, NoRecord: true})
	max := int64(20)
	a, err := sh(t, d, "greedy", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			<-start
			codes[i], _, _ = modelCall(t, d, "/v1/chat/completions", cred, body)
		})
	}
	close(start)
	wg.Wait()
	if s := spendOf(t, d, a.ID); s.Tokens > max+15 {
		t.Fatalf("%d calls together spent %d tokens under max_tokens %d (answers %v): more than one call past it", n, s.Tokens, max, codes)
	}
}

// TestModelGatewayAttackFanOutAndLooseTypes: a chat call asking for n
// choices gets what is left shared among them; fields that decide how a
// call is metered must have their types ("stream": "true" would stream
// without the usage chunk kin asks for on an upstream lenient with
// types), and a background response (answered before its usage exists)
// is refused; none of these reaches the upstream.
func TestModelGatewayAttackFanOutAndLooseTypes(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 1})
	max := int64(20)
	a, err := sh(t, d, "fan", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	for _, body := range []string{
		`{"model":"gpt-4o-mini","stream":"true","messages":[]}`,
		`{"model":"gpt-4o-mini","stream":1,"messages":[]}`,
		`{"model":"gpt-4o-mini","stream":true,"stream_options":"x","messages":[]}`,
		`{"model":"gpt-4o-mini","n":"8","messages":[]}`,
		`{"model":"gpt-4o-mini","n":100000,"messages":[]}`,
	} {
		if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, body); code != 400 {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
	if code, _, b := modelCall(t, d, "/v1/responses", cred, `{"model":"gpt-4o-mini","background":true,"input":"hi"}`); code != 400 || !strings.Contains(string(b), "background") {
		t.Errorf("a background response: %d %s", code, b)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d refused calls reached the upstream", n)
	}
	if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, `{"model":"gpt-4o-mini","n":8,"max_tokens":1000,"messages":[]}`); code != 200 {
		t.Fatalf("n 8: %d %s", code, b)
	}
	var sent struct {
		N                   int
		MaxTokens           int64 `json:"max_tokens"`
		MaxCompletionTokens int64 `json:"max_completion_tokens"`
	}
	reqs := up.Requests()
	if len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &sent) != nil {
		t.Fatalf("the upstream got %d requests", len(reqs))
	}
	if sent.N != 8 || sent.MaxTokens*8 > max || sent.MaxCompletionTokens*8 > max {
		t.Fatalf("8 choices with %d tokens left went with max_tokens %d, max_completion_tokens %d per choice", max, sent.MaxTokens, sent.MaxCompletionTokens)
	}
}

// TestModelGatewayAttackCredentialsAcrossRestart: after the daemon
// restarts, an agent it re-adopted calls with the credential it was
// given (the key is derived from the log key, which persists), and an
// agent that ended before the restart stays refused.
func TestModelGatewayAttackCredentialsAcrossRestart(t *testing.T) {
	home := kintest.TempHome(t)
	removeHomeCgroup(t, home)
	up := fakemodel.Start(t, fakemodel.Options{Key: upstreamKey, InputTokens: 10, OutputTokens: 5})
	opts := []kintest.Option{kintest.WithHome(home), kintest.WithHTTP(),
		kintest.WithModelUpstream("openai", "openai", up.URL, upstreamKey)}
	d1 := kintest.StartDaemon(t, append(opts, kintest.WithLeaveRunning())...)
	live, err := sh(t, d1, "live", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := sh(t, d1, "gone", 0, nil, "true")
	if err != nil {
		t.Fatal(err)
	}
	ended(t, d1, gone.ID)
	liveCred, goneCred := d1.ModelCredential(live.ID), d1.ModelCredential(gone.ID)
	if err := d1.Close(); err != nil {
		t.Fatal(err)
	}
	d2 := kintest.StartDaemon(t, opts...)
	kintest.WaitFor(t, 20*time.Second, "the agent to be re-adopted", func() bool {
		a, _ := d2.Client.Agent(ctx, live.ID)
		return a != nil && !a.Reconciling && a.Running()
	})
	if d2.ModelCredential(live.ID) != liveCred {
		t.Fatalf("the credential changed across the restart")
	}
	if code, _, b := modelCall(t, d2, "/v1/chat/completions", liveCred, chatBody); code != 200 {
		t.Fatalf("a re-adopted agent's credential: %d %s", code, b)
	}
	if code, _, b := modelCall(t, d2, "/v1/chat/completions", goneCred, chatBody); code != 401 {
		t.Fatalf("an agent that ended before the restart: %d %s", code, b)
	}
}
