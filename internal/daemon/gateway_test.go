package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// upstreamKey is the operator's key the fake upstream checks: no agent may
// ever see it.
const upstreamKey = "sk-upstream-secret-4f1b9c27e0"

// gatewayDaemon starts a fake upstream speaking both APIs and a daemon
// with the gateway on it, the HTTP address on, and a price table.
func gatewayDaemon(t *testing.T, o fakemodel.Options, opts ...kintest.Option) (*kintest.Daemon, *fakemodel.Server) {
	t.Helper()
	o.Key = upstreamKey
	up := fakemodel.Start(t, o)
	prices := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(prices, []byte(`{"prices": {
		"gpt-4o-mini": {"input": 1, "output": 2},
		"claude-*": {"input": 3, "output": 15, "cached_input": 0.3}
	}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	opts = append([]kintest.Option{kintest.WithHTTP(), kintest.WithPolicyConfig(prices),
		kintest.WithModelUpstream("openai", "openai", up.URL, upstreamKey),
		kintest.WithModelUpstream("anthropic", "anthropic", up.URL, upstreamKey)}, opts...)
	return kintest.StartDaemon(t, opts...), up
}

// asUID is an HTTP client whose connections are made as uid (the socket's
// owner, which the kernel lists in /proc/net/tcp and the gateway checks
// against the agent's): each is created on a locked thread whose fsuid is
// uid for that moment.
func asUID(uid uint32) *http.Client {
	c, ok := clients.Load(uid)
	if !ok {
		c, _ = clients.LoadOrStore(uid, asUIDWith(uid, 16))
	}
	return c.(*http.Client)
}

// asUIDWith is a new asUID client keeping idle connections open.
func asUIDWith(uid uint32, idle int) *http.Client {
	dial := (&net.Dialer{}).DialContext
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			prev, err := unix.SetfsuidRetUid(int(uid))
			if err != nil {
				return nil, err
			}
			defer unix.Setfsuid(prev)
			return dial(ctx, network, addr)
		},
		MaxIdleConnsPerHost: idle,
		MaxIdleConns:        2 * idle,
	}}
}

var clients sync.Map // uid → *http.Client

// clientFor is the client an agent's process would call with: its
// connections made as the uid of the agent cred names (when agents run as
// their own uids), else as the test's.
func clientFor(d *kintest.Daemon, cred string) *http.Client {
	var id int64
	if _, err := fmt.Sscanf(cred, "kin-gw1-%d-", &id); err == nil {
		if uid, ok := d.Runner.AgentUID(kin.AgentID(id)); ok {
			return asUID(uid)
		}
	}
	return http.DefaultClient
}

// modelCall posts body to the gateway on the HTTP address with cred, as
// an OpenAI (bearer) or Anthropic (x-api-key) SDK in the agent cred names
// would.
func modelCall(t *testing.T, d *kintest.Daemon, path, cred, body string) (int, http.Header, []byte) {
	t.Helper()
	return modelCallWith(t, clientFor(d, cred), d, path, cred, body)
}

func modelCallWith(t *testing.T, client *http.Client, d *kintest.Daemon, path, cred, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", "http://"+d.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/v1/messages") {
		req.Header.Set("x-api-key", cred)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
const messagesBody = `{"model":"claude-3-5-haiku-latest","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`

func modelCalls(t *testing.T, d *kintest.Daemon) []kin.ModelCallData {
	t.Helper()
	evs, err := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventModelCall}})
	if err != nil {
		t.Fatal(err)
	}
	var out []kin.ModelCallData
	for _, e := range evs {
		var c kin.ModelCallData
		if err := json.Unmarshal(e.Data, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func spendOf(t *testing.T, d *kintest.Daemon, id kin.AgentID) kin.Spend {
	t.Helper()
	pol, err := d.Client.Policy(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return pol.Spend
}

// TestModelGatewayAgentCallsThroughKin: an agent under a budget calls both
// APIs with curl and the environment kin gave it, on the HTTP address and
// on its socket, streaming and not; every call is metered exactly from
// the upstream's answer, the upstream sees only the operator's key, and
// the agent's environment, files and log hold no upstream key.
func TestModelGatewayAgentCallsThroughKin(t *testing.T) {
	// Agents share the host's network namespace under every containment
	// kin has (none makes a network namespace), so the HTTP address on
	// loopback is reachable from inside each.
	for _, containment := range []string{"cgroup2", "pid-namespaces", "process-groups"} {
		t.Run(containment, func(t *testing.T) { testAgentCallsThroughKin(t, containment) })
	}
}

func testAgentCallsThroughKin(t *testing.T, containment string) {
	if containment == "cgroup2" && os.Geteuid() != 0 {
		t.Skip("cgroup2 containment here needs root")
	}
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 4}, kintest.WithContainment(containment))
	if got := d.Runner.Supervisor().Containment(); got != containment {
		t.Skipf("containment %s is not available here (got %s)", containment, got)
	}
	max := int64(1000)
	script := `set -e
env | grep -E '^(OPENAI|ANTHROPIC|KIN_MODEL)' | sort | sed 's/^/ENV /'
j='Content-Type: application/json'
echo "CHAT $(curl -sS -H "Authorization: Bearer $OPENAI_API_KEY" -H "$j" -d '` + chatBody + `' "$OPENAI_BASE_URL/chat/completions")"
curl -sSN -H "Authorization: Bearer $OPENAI_API_KEY" -H "$j" -d '{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}' "$OPENAI_BASE_URL/chat/completions" | sed 's/^/SSE /'
curl -sSN -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H "$j" -d '{"model":"claude-3-5-haiku-latest","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages" | sed 's/^/ASSE /'
echo "EMB $(curl -sS --unix-socket "$KIN_SOCKET" -H "Authorization: Bearer $KIN_MODEL_KEY" -H "$j" -d '{"model":"text-embedding-3-small","input":"hi"}' http://kin/v1/embeddings | head -c 40)"
echo END`
	a, err := sh(t, d, "caller", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, script)
	if err != nil {
		t.Fatal(err)
	}
	got, out := ended(t, d, a.ID)
	if got.State == kin.StateFailed || got.State == kin.StateCancelled || !strings.Contains(out, "\nEND") {
		t.Fatalf("the agent ended %s:\n%s", got.State, out)
	}
	if strings.Contains(out, upstreamKey) {
		t.Fatalf("the agent saw the upstream key:\n%s", out)
	}
	for _, want := range []string{"ENV OPENAI_BASE_URL=http://" + d.HTTPAddr() + "/v1\n", "ENV ANTHROPIC_BASE_URL=http://" + d.HTTPAddr() + "\n",
		"ENV OPENAI_API_KEY=kin-gw1-", "ENV ANTHROPIC_API_KEY=kin-gw1-", `"prompt_tokens":10`, "ASSE event: message_stop", "SSE data: [DONE]", `EMB {"data":`} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's output lacks %q:\n%s", want, out)
		}
	}
	// The client did not ask for the usage chunk: kin asked for it and
	// kept it.
	var sseUsage bool
	for _, l := range strings.Split(out, "\n") {
		sseUsage = sseUsage || strings.HasPrefix(l, "SSE ") && strings.Contains(l, `"usage":{`)
	}
	if sseUsage || !strings.Contains(out, "SSE data: [DONE]") {
		t.Errorf("the stream passed on kin's usage chunk:\n%s", out)
	}
	// chat 15 + chat stream 15 + messages stream (10 + 4 cached read + 5)
	// 19 + embeddings 10.
	s := spendOf(t, d, a.ID)
	if s.Tokens != 59 || s.SubtreeTokens != 59 {
		t.Fatalf("spend = %+v, want 59 tokens", s)
	}
	wantCost := 2*(10*1+5*2)/1e6 + (10*3+4*0.3+5*15)/1e6
	if math.Abs(s.Cost-wantCost) > 1e-12 {
		t.Fatalf("cost = %v, want %v", s.Cost, wantCost)
	}
	calls := modelCalls(t, d)
	if len(calls) != 4 {
		t.Fatalf("%d model.call events: %+v", len(calls), calls)
	}
	for _, c := range calls {
		if c.Agent != a.ID || c.Status != 200 || c.Tokens == 0 || c.LatencyMS <= 0 {
			t.Errorf("model.call %+v", c)
		}
	}
	if c := calls[2]; c.API != "anthropic" || !c.Stream || c.InputTokens != 14 || c.CachedTokens != 4 || c.OutputTokens != 5 {
		t.Errorf("the streamed messages call = %+v", c)
	}
	// The upstream saw the operator's key, never the agent's credential,
	// and the stream asked for its usage.
	reqs := up.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	for _, r := range reqs {
		auth := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		if !strings.Contains(auth, upstreamKey) || strings.Contains(string(r.Body), "kin-gw1-") {
			t.Errorf("upstream request %s %s: auth %q", r.Method, r.Path, auth)
		}
	}
	if !bytes.Contains(reqs[1].Body, []byte(`"include_usage":true`)) {
		t.Errorf("the stream did not ask for usage: %s", reqs[1].Body)
	}
	// No file kin keeps for agents holds the key.
	filepath.WalkDir(d.Home, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() || strings.HasSuffix(path, ".db") || strings.Contains(path, "kin.db") {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(upstreamKey)) {
			t.Errorf("%s holds the upstream key", path)
		}
		return nil
	})
}

// TestModelGatewayRefusesInTheProvidersShape: a subtree at its cap gets
// 429 in each provider's error shape with kin's code (and is stopped, as
// an exhausted subtree is); the call before it had its output capped to
// what was left.
func TestModelGatewayRefusesInTheProvidersShape(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	max := int64(20)
	a, err := sh(t, d, "spender", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 200 {
		t.Fatalf("first call: %d %s", code, b)
	}
	if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 200 {
		t.Fatalf("second call: %d %s", code, b)
	}
	// 5 tokens were left for the second: its output was capped to 5.
	if r := up.Requests()[1]; !bytes.Contains(r.Body, []byte(`"max_completion_tokens":5`)) {
		t.Fatalf("the second call was not capped: %s", r.Body)
	}
	code, h, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody)
	var oe struct {
		Error struct{ Message, Type, Code string }
	}
	if code != 429 || json.Unmarshal(b, &oe) != nil || oe.Error.Code != "budget_exhausted" || oe.Error.Type != "insufficient_quota" ||
		!strings.Contains(oe.Error.Message, "max_tokens") || h.Get("X-Should-Retry") != "false" {
		t.Fatalf("OpenAI refusal: %d %s %v", code, b, h)
	}
	code, _, b = modelCall(t, d, "/v1/messages", cred, messagesBody)
	var ae struct {
		Type  string
		Error struct{ Type, Message, Code string }
	}
	if code != 429 || json.Unmarshal(b, &ae) != nil || ae.Type != "error" || ae.Error.Type != "rate_limit_error" || ae.Error.Code != "budget_exhausted" {
		t.Fatalf("Anthropic refusal: %d %s", code, b)
	}
	if n := len(up.Requests()); n != 2 {
		t.Fatalf("%d calls reached the upstream, want 2", n)
	}
	if got, _ := ended(t, d, a.ID); got.EndReason != "budget_exhausted" {
		t.Fatalf("end reason %q", got.EndReason)
	}
	// Once ended, its credential is still refused with the budget (the
	// refusal an agent sees first), never forwarded.
	if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 429 {
		t.Fatalf("after the stop: %d %s", code, b)
	}
	if s := spendOf(t, d, a.ID); s.Tokens != 30 {
		t.Fatalf("spend %+v, want 30", s)
	}
}

// TestModelGatewayCredentials: a credential works only for its agent,
// only while it runs, and only on its own socket; a spawn carrying an
// upstream key is refused; a forged one is refused.
func TestModelGatewayCredentials(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	other, err := sh(t, d, "other", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	otherCred := d.ModelCredential(other.ID)
	// Another agent's credential on this agent's socket.
	req := kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "thief", Responsible: "Dr. Schmidt"},
		Command: []string{"/bin/sh", "-c", `echo "CODE $(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$KIN_SOCKET" -H "Authorization: Bearer $STOLEN" -H 'Content-Type: application/json' -d '` + chatBody + `' http://kin/v1/chat/completions)"
echo "OWN $(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$KIN_SOCKET" -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' -d '` + chatBody + `' http://kin/v1/chat/completions)"`},
		Env: []string{"STOLEN=" + otherCred}}
	thief, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, out := ended(t, d, thief.ID)
	if !strings.Contains(out, "CODE 403") || !strings.Contains(out, "OWN 200") {
		t.Fatalf("another agent's credential on the socket:\n%s", out)
	}
	// The ended agent's credential is revoked.
	if code, _, b := modelCall(t, d, "/v1/chat/completions", d.ModelCredential(thief.ID), chatBody); code != 401 || !strings.Contains(string(b), "does not run") {
		t.Fatalf("an ended agent's credential: %d %s", code, b)
	}
	// On the HTTP address a credential works only from the agent's uid,
	// where agents run as their own.
	if _, ok := d.Runner.AgentUID(other.ID); ok {
		code, _, b := modelCallWith(t, asUID(uint32(os.Geteuid())), d, "/v1/chat/completions", otherCred, chatBody)
		if code != 403 || !strings.Contains(string(b), "not the agent's") {
			t.Fatalf("another uid with agent %d's credential: %d %s", other.ID, code, b)
		}
		if code, _, b := modelCall(t, d, "/v1/chat/completions", otherCred, chatBody); code != 200 {
			t.Fatalf("the agent's own uid: %d %s", code, b)
		}
	}
	// A forged one, and the operator's token, are not credentials.
	forged := otherCred[:len(otherCred)-2] + "xx"
	for _, c := range []string{forged, d.OperatorToken(), upstreamKey, ""} {
		if code, _, b := modelCall(t, d, "/v1/chat/completions", c, chatBody); code != 401 {
			t.Fatalf("credential %q: %d %s", c, code, b)
		}
	}
	// A spawn handing down the upstream key is refused; kin's variables
	// replace the spawner's.
	_, err = sh(t, d, "leaky", 0, nil, "true")
	if err != nil {
		t.Fatal(err)
	}
	req = kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "leak", Responsible: "Dr. Schmidt"},
		Command: []string{"/bin/true"}, Env: []string{"MY_KEY=x" + upstreamKey}}
	if _, err := d.Client.Spawn(ctx, req); kin.ErrorCodeOf(err) != kin.ECodeDenied || strings.Contains(err.Error(), upstreamKey) {
		t.Fatalf("a spawn with the upstream key: %v", err)
	}
	req = kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "own", Responsible: "Dr. Schmidt"},
		Command: []string{"/bin/sh", "-c", `echo "KEY $OPENAI_API_KEY"; echo "TOKEN [$ANTHROPIC_AUTH_TOKEN]"`}, Env: []string{"OPENAI_API_KEY=" + otherCred, "ANTHROPIC_AUTH_TOKEN=" + otherCred}}
	own, err := d.Client.Spawn(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	_, out = ended(t, d, own.ID)
	if !strings.Contains(out, "KEY "+d.ModelCredential(own.ID)+"\n") || !strings.Contains(out, "TOKEN []") {
		t.Fatalf("the spawner's model variables were not replaced:\n%s", out)
	}
	if n := len(up.Requests()); n != 1+ownCalls(d, other.ID) {
		t.Fatalf("%d calls reached the upstream", n)
	}
}

// ownCalls is 1 where the test called as agent id's uid (agents run as
// their own uids), else 0.
func ownCalls(d *kintest.Daemon, id kin.AgentID) int {
	if _, ok := d.Runner.AgentUID(id); ok {
		return 1
	}
	return 0
}

// TestModelGatewayModelsAllowList: models lists attenuate down the tree
// like tools, and a call to a model the policy does not allow is 403 in
// the provider's shape.
func TestModelGatewayModelsAllowList(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	root, err := sh(t, d, "lead", 0, &kin.Policy{Models: &kin.ToolRules{Allow: []string{"gpt-*"}}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	_, err = sh(t, d, "greedy", root.ID, &kin.Policy{Models: &kin.ToolRules{Allow: []string{"claude-*"}}}, "sleep 600")
	var esc *kin.EscalationError
	if !asEscalation(err, &esc) || esc.Excess[0].Field != "models" {
		t.Fatalf("a child asking for a model its parent may not use: %v", err)
	}
	modest, err := sh(t, d, "modest", root.ID, &kin.Policy{Models: &kin.ToolRules{Allow: []string{"gpt-4o*"}}}, "sleep 600")
	if err != nil {
		t.Fatalf("a narrower list: %v", err)
	}
	heir, err := sh(t, d, "heir", root.ID, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	// A child with a list of its own, and one without (its parent's
	// binds it), may not call what the parent may not.
	for _, kid := range []*kin.Agent{modest, heir} {
		if code, _, b := modelCall(t, d, "/v1/messages", d.ModelCredential(kid.ID), messagesBody); code != 403 || !strings.Contains(string(b), "agent "+root.ID.String()) {
			t.Fatalf("child %s calling a model its parent may not: %d %s", kid.Name, code, b)
		}
	}
	cred := d.ModelCredential(root.ID)
	code, h, b := modelCall(t, d, "/v1/messages", cred, messagesBody)
	var ae struct {
		Type  string
		Error struct{ Type, Message, Code string }
	}
	if code != 403 || json.Unmarshal(b, &ae) != nil || ae.Error.Type != "permission_error" || ae.Error.Code != "permission_denied" || h.Get("X-Should-Retry") != "false" {
		t.Fatalf("a model not allowed: %d %s", code, b)
	}
	if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 200 {
		t.Fatalf("an allowed model: %d %s", code, b)
	}
	if n := len(up.Requests()); n != 1 {
		t.Fatalf("%d calls reached the upstream, want 1", n)
	}
	// The models list holds only what the agent may call.
	req, _ := http.NewRequest("GET", "http://"+d.HTTPAddr()+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := clientFor(d, cred).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Data []struct{ ID string } }
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(list.Data) != 1 || list.Data[0].ID != "gpt-4o-mini" {
		t.Fatalf("GET /v1/models: %d %+v", resp.StatusCode, list)
	}
	// count_tokens is forwarded and counts against nothing.
	free, err := sh(t, d, "free", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, b := modelCall(t, d, "/v1/messages/count_tokens", d.ModelCredential(free.ID), messagesBody); code != 200 || !strings.Contains(string(b), "input_tokens") {
		t.Fatalf("count_tokens: %d %s", code, b)
	}
	if s := spendOf(t, d, free.ID); s.Tokens != 0 || len(modelCalls(t, d)) != 1 {
		t.Fatalf("count_tokens was counted: %+v", s)
	}
	// /metrics counts the call by model.
	req, _ = http.NewRequest("GET", "http://"+d.HTTPAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+d.OperatorToken())
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`kin_model_tokens_total{kind="input",model="gpt-4o-mini"} 10`, `kin_model_tokens_total{kind="output",model="gpt-4o-mini"} 5`,
		`kin_model_calls_total{api="openai",code="200",model="gpt-4o-mini"} 1`, `kin_model_cost_total{model="gpt-4o-mini"} 2e-05`,
		// and by tree: the lead's is its own.
		`kin_model_root_tokens_total{kind="input",root="` + root.ID.String() + `"} 10`, `kin_model_root_cost_total{root="` + root.ID.String() + `"} 2e-05`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func asEscalation(err error, out **kin.EscalationError) bool {
	e, ok := err.(*kin.EscalationError)
	if ok {
		*out = e
	}
	return ok && len(e.Excess) > 0
}

// TestModelGatewayConcurrentChildrenStayWithinBudget: a tree whose
// children spend concurrently never exceeds max_tokens by more than one
// call's tokens per agent (20 rounds, each a fresh tree).
func TestModelGatewayConcurrentChildrenStayWithinBudget(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, NoRecord: true})
	const children, callTokens = 4, 15
	max := int64(200)
	for round := range 20 {
		root, err := sh(t, d, fmt.Sprintf("lead%d", round), 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		var creds []string
		for i := range children {
			c, err := sh(t, d, fmt.Sprintf("kid%d-%d", round, i), root.ID, nil, "sleep 600")
			if err != nil {
				t.Fatal(err)
			}
			creds = append(creds, d.ModelCredential(c.ID))
		}
		var wg sync.WaitGroup
		for _, cred := range creds {
			wg.Go(func() {
				for range 100 {
					code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody)
					if code == 429 || code == 401 {
						return // refused, or stopped with its subtree
					}
					if code != 200 {
						t.Errorf("call: %d %s", code, b)
						return
					}
				}
				t.Errorf("100 calls of %d tokens under a budget of %d", callTokens, max)
			})
		}
		wg.Wait()
		s := spendOf(t, d, root.ID)
		if s.SubtreeTokens < max || s.SubtreeTokens > max+children*callTokens {
			t.Fatalf("round %d: the subtree spent %d tokens: max_tokens %d, at most %d over", round, s.SubtreeTokens, max, children*callTokens)
		}
		ended(t, d, root.ID)
	}
	if diff, err := d.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("the caches and the store differ: %v\n%s", err, diff)
	}
}

// TestModelGatewayRateLimits: the profile's quotas.model_requests and
// quotas.model_tokens bound each agent's calls and its subtree's (an
// ancestor's bucket for its descendants), refused with 429 rate_limited
// and Retry-After, which the SDKs wait for (no X-Should-Retry: false).
func TestModelGatewayRateLimits(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5},
		kintest.WithProfile(quotaProfile(t, `{"model_requests": {"per_second": 0.001, "burst": 3}, "model_tokens": {"per_second": 0.001, "burst": 20}}`)))
	lead, err := sh(t, d, "lead", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(lead.ID)
	// 20 tokens: the first call (15) fits, the second is admitted on the
	// 5 left and leaves the bucket in debt, the third waits.
	for i, want := range []int{200, 200, 429} {
		code, h, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody)
		if code != want {
			t.Fatalf("call %d: %d %s", i, code, b)
		}
		if code == 429 {
			var oe struct {
				Error struct{ Type, Code, Message string }
			}
			json.Unmarshal(b, &oe)
			if oe.Error.Code != "rate_limited" || oe.Error.Type != "rate_limit_error" || !strings.Contains(oe.Error.Message, "quotas.model_tokens") ||
				h.Get("Retry-After") == "" || h.Get("X-Should-Retry") != "" {
				t.Fatalf("the refusal: %s %v", b, h)
			}
		}
	}
	// The subtree shares its ancestor's bucket: four children, one call
	// of 10 tokens each, each its own first; the lead's bucket for its
	// descendants (model_tokens, burst 20) refuses the third and fourth.
	var codes []int
	for i := range 4 {
		kid, err := sh(t, d, fmt.Sprintf("kid%d", i), lead.ID, nil, "sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		code, _, b := modelCall(t, d, "/v1/embeddings", d.ModelCredential(kid.ID), `{"model":"text-embedding-3-small","input":"hi"}`)
		if code == 429 && !strings.Contains(string(b), fmt.Sprintf("ancestor agent %d", lead.ID)) {
			t.Fatalf("kid %d refused by its own bucket: %s", i, b)
		}
		codes = append(codes, code)
	}
	if fmt.Sprint(codes) != "[200 200 429 429]" {
		t.Fatalf("the children's calls: %v", codes)
	}
	if n := len(up.Requests()); n != 4 {
		t.Fatalf("%d calls reached the upstream", n)
	}
}

// TestModelGatewaySpans: with traces on, each model call is a span under
// the calling agent's spawn span, in its tree's trace, without content.
func TestModelGatewaySpans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, Reply: "secret completion"}, withTraces("file:"+path))
	root, err := sh(t, d, "lead", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	kid, err := sh(t, d, "kid", root.ID, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, b := modelCall(t, d, "/v1/chat/completions", d.ModelCredential(kid.ID), chatBody); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	if err := d.Close(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	var spawn, call *jsonSpan
	for _, s := range readSpans(t, path) {
		switch {
		case s.Name == "kin.model.call":
			call = &s
		case s.attr("kin.agent.id") == kid.ID.String():
			spawn = &s
		}
	}
	if spawn == nil || call == nil {
		t.Fatalf("spans: spawn %v, call %v", spawn, call)
	}
	if call.Parent.SpanID != spawn.SpanContext.SpanID || call.SpanContext.TraceID != spawn.SpanContext.TraceID ||
		call.attr("gen_ai.request.model") != "gpt-4o-mini" || call.attr("gen_ai.usage.input_tokens") != "10" || call.attr("kin.root") != root.ID.String() {
		t.Fatalf("the call's span %+v, the kid's spawn %+v", call, spawn)
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("secret completion")) || bytes.Contains(b, []byte(`"hi"`)) {
		t.Fatal("a span holds the prompt or the completion")
	}
}

// TestModelGatewayUpstreamFailures: an upstream's error passes through in
// its shape (and is recorded, without tokens); one that refuses the
// operator's key is a 502 that quotes nothing of its answer; one that is
// down is a 502 in the provider's shape, recorded with status 0.
func TestModelGatewayUpstreamFailures(t *testing.T) {
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	a, err := sh(t, d, "caller", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	up.FailNext(1, 529, "", "overloaded")
	if code, _, b := modelCall(t, d, "/v1/messages", cred, messagesBody); code != 529 || !strings.Contains(string(b), "overloaded_error") {
		t.Fatalf("an upstream error: %d %s", code, b)
	}
	// The operator's key is wrong: a second daemon on the same fake.
	d2 := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithModelUpstream("openai", "openai", up.URL, "sk-wrong-key-0000"))
	b2, err := sh(t, d2, "caller", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	code, h, b := modelCall(t, d2, "/v1/chat/completions", d2.ModelCredential(b2.ID), chatBody)
	if code != 502 || !strings.Contains(string(b), "refused the key") || strings.Contains(string(b), "sk-wrong") || h.Get("X-Should-Retry") != "false" {
		t.Fatalf("a refused operator key: %d %s", code, b)
	}
	up.Close()
	code, _, b = modelCall(t, d, "/v1/chat/completions", cred, chatBody)
	var oe struct {
		Error struct{ Type, Code, Message string }
	}
	if code != 502 || json.Unmarshal(b, &oe) != nil || oe.Error.Type != "api_error" || oe.Error.Code != "unavailable" {
		t.Fatalf("the upstream down: %d %s", code, b)
	}
	calls := modelCalls(t, d)
	if len(calls) != 2 || calls[0].Status != 529 || calls[0].Tokens != 0 || calls[1].Status != 0 || calls[1].Error == "" {
		t.Fatalf("model.call events %+v", calls)
	}
	if s := spendOf(t, d, a.ID); s.Tokens != 0 {
		t.Fatalf("spend %+v", s)
	}
}

// TestConcurrentSpendCrossingACapStopsOnce: usage reports that cross a
// cap together each ask for the subtree's stop; it is recorded once (one
// budget.exhausted event, the same reason in the store and the cache).
func TestConcurrentSpendCrossingACapStopsOnce(t *testing.T) {
	d := kintest.StartDaemon(t)
	max := int64(100)
	lead, err := sh(t, d, "lead", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	var kids []kin.AgentID
	for i := range 8 {
		k, err := sh(t, d, fmt.Sprintf("kid%d", i), lead.ID, nil, "sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, k.ID)
	}
	var wg sync.WaitGroup
	for _, k := range kids {
		wg.Go(func() {
			if _, err := d.Client.Usage(ctx, kin.UsageRequest{Agent: k, Tokens: 60}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	ended(t, d, lead.ID)
	evs, err := d.Client.Events(ctx, kin.EventFilter{Types: []string{kin.EventBudgetExhausted}})
	if err != nil || len(evs) != 1 {
		t.Fatalf("%d budget.exhausted events (%v)", len(evs), err)
	}
	if diff, err := d.CacheDiff(ctx); err != nil || diff != "" {
		t.Fatalf("the caches and the store differ: %v\n%s", err, diff)
	}
}

// TestModelGatewayRefusesAStoppedSubtreeOnceItsEndIsRecorded: a stop (or
// a cancellation) records its agents' ends once their processes are gone,
// and each process's exit is handled on a goroutine of its own: the
// credentials are revoked when the stop finds the processes gone, before
// the record, not when each exit's goroutine gets to run. Once the store
// shows an agent of the stopped subtree ended, the gateway refuses its
// credential (the race this closes is a goroutine's hand-off: without it
// the check fails only when an exit's goroutine runs late, as on a loaded
// machine).
func TestModelGatewayRefusesAStoppedSubtreeOnceItsEndIsRecorded(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	root, err := sh(t, d, "root", 0, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	ids := []kin.AgentID{root.ID}
	for i := range 6 {
		c, err := sh(t, d, fmt.Sprintf("child-%d", i), root.ID, nil, "sleep 600")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	for _, id := range ids {
		if code, _, b := modelCall(t, d, "/v1/chat/completions", d.ModelCredential(id), chatBody); code != 200 {
			t.Fatalf("agent %d before the stop: %d %s", id, code, b)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				a, err := d.Client.Agent(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				if a.EndedAt.IsZero() {
					continue
				}
				// Recorded ended: its credential is no more.
				if d.Runner.Runs(id) {
					errs <- fmt.Errorf("agent %d is recorded ended (%s) and its credential still honoured", id, a.State)
				}
				return
			}
			errs <- fmt.Errorf("agent %d: its end was not recorded", id)
		})
	}
	if _, err := d.Client.Stop(ctx, kin.StopRequest{ID: root.ID}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if code, _, b := modelCall(t, d, "/v1/chat/completions", d.ModelCredential(id), chatBody); code != 401 {
			t.Errorf("agent %d after the stop: %d %s", id, code, b)
		}
	}
}

// TestModelCallsOfAnUncappedChainReadItOnce: an agent no link of whose
// chain has a max_tokens or max_cost has its chain read by its first
// call's metering only (the policies and links that decide it never
// change); under a cap every call's metering reads it. The spend and the
// subtree sums stay exact either way, the cache's as the store's.
func TestModelCallsOfAnUncappedChainReadItOnce(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, NoRecord: true})
	const calls, callTokens = 5, 15
	spawns, big := int64(50), int64(1_000_000)
	for _, tc := range []struct {
		name  string
		pol   *kin.Policy // the lead's
		reads int64       // chain reads for the kid's calls
	}{
		{"uncapped", &kin.Policy{Budget: &kin.Budget{MaxDescendants: &spawns}}, 1},
		{"capped", &kin.Policy{Budget: &kin.Budget{MaxTokens: &big}}, calls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lead, err := sh(t, d, "lead-"+tc.name, 0, tc.pol, "sleep 600")
			if err != nil {
				t.Fatal(err)
			}
			kid, err := sh(t, d, "kid-"+tc.name, lead.ID, nil, "sleep 600")
			if err != nil {
				t.Fatal(err)
			}
			cred := d.ModelCredential(kid.ID)
			before := d.Authority.MeterChainReads()
			trips0, counted := d.WriterRoundTrips()
			for i := range calls {
				if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 200 {
					t.Fatalf("call %d: %d %s", i, code, b)
				}
				// Metered once the response is sent: wait for it.
				want := int64(i+1) * callTokens
				kintest.WaitFor(t, 10*time.Second, "the call's metering", func() bool { return spendOf(t, d, kid.ID).Tokens == want })
			}
			if trips, _ := d.WriterRoundTrips(); counted {
				t.Logf("%s: %.1f writer round trips a call", tc.name, float64(trips-trips0)/calls)
			}
			if got := d.Authority.MeterChainReads() - before; got != tc.reads {
				t.Errorf("%d calls' metering read the chain %d times, want %d", calls, got, tc.reads)
			}
			for _, id := range []kin.AgentID{kid.ID, lead.ID} {
				if s := spendOf(t, d, id); s.SubtreeTokens != calls*callTokens {
					t.Errorf("agent %d's subtree spent %d tokens, want %d", id, s.SubtreeTokens, calls*callTokens)
				}
			}
			if diff, err := d.CacheDiff(ctx); err != nil || diff != "" {
				t.Fatalf("the caches and the store differ: %v\n%s", err, diff)
			}
		})
	}
}

// TestModelCallCrossingACapClaimsTheEndBeforeItsAnswer: the call that
// crosses a subtree's cap is answered only once the subtree's stop has
// claimed its agents, so an agent that ends right after that answer (its
// last call done) is recorded cancelled for its budget, not as ending on
// its own (README's walk-through raced there on a loaded machine: the stop
// was begun in the background after the answer).
func TestModelCallCrossingACapClaimsTheEndBeforeItsAnswer(t *testing.T) {
	d, _ := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5})
	for round := range 5 {
		max := int64(20)
		// It ignores the stop's SIGTERM, within a grace longer than the
		// test: it ends when the test kills it, as if by itself.
		grace := kin.Duration(time.Minute)
		a, err := d.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{
			Name: fmt.Sprintf("asker-%d", round), Responsible: "Dr. Schmidt",
			Policy: &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}}, Grace: &grace,
			Command: []string{"/bin/sh", "-c", `trap "" TERM; while :; do sleep 1; done`}})
		if err != nil {
			t.Fatal(err)
		}
		// The stop's SIGTERM must find the trap in place: on a loaded
		// machine the shell may not have run it yet when the calls are done.
		kintest.WaitFor(t, 10*time.Second, "the shell to ignore SIGTERM", func() bool {
			ignored, _ := proctest.SignalIgnored(a.PID, unix.SIGTERM)
			return ignored
		})
		cred := d.ModelCredential(a.ID)
		for call := range 2 {
			if code, _, b := modelCall(t, d, "/v1/chat/completions", cred, chatBody); code != 200 {
				t.Fatalf("round %d call %d: %d %s", round, call, code, b)
			}
		}
		// The second call crossed the cap (30 of 20 tokens): the agent
		// ends at once, by itself as far as kin can tell.
		if err := unix.Kill(-a.PID, unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		got, _ := ended(t, d, a.ID)
		if got.State != kin.StateCancelled || got.EndReason != "budget_exhausted" {
			t.Fatalf("round %d: the agent ended %s (%s); want cancelled for its budget", round, got.State, got.EndReason)
		}
	}
}
