package daemon_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/modelsdktest"
	"github.com/kin-agents/kin/kin"
)

// sdkCalls are the calls the agent makes with the official SDKs, and the
// tokens each is metered at (fakemodel: 10 in, of which 4 cached for
// OpenAI; Anthropic's 10 in plus 4 read from the cache; 5 out).
var sdkCalls = []struct {
	args   []string
	tokens int64
}{
	{[]string{"chat"}, 15},
	{[]string{"chat-stream"}, 15}, // the client asks for no usage: kin does
	{[]string{"chat-stream", "--include-usage"}, 15},
	{[]string{"responses"}, 15},
	{[]string{"responses-stream"}, 15},
	{[]string{"messages"}, 19},
	{[]string{"messages-stream"}, 19},
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestModelGatewayRealSDKs: an agent spawned under a budget runs the
// official openai and @anthropic-ai/sdk npm packages with nothing but the
// environment kin gave it; every call, streamed ones included, reaches
// the upstream with the operator's key, the SDKs get the upstream's
// answers, and the agent is metered exactly what the upstream reported,
// priced.
func TestModelGatewayRealSDKs(t *testing.T) {
	n := modelsdktest.Install(t)
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 4, Reply: "ok"})
	var script strings.Builder
	for _, c := range sdkCalls {
		argv := n.Argv(c.args...)
		for i := range argv {
			argv[i] = shellQuote(argv[i])
		}
		script.WriteString("echo \"RESULT " + strings.Join(c.args, " ") + " $(" + strings.Join(argv, " ") + " 2>&1)\"\n")
	}
	script.WriteString("echo END\n")
	max := int64(1000)
	a, err := sh(t, d, "sdk-user", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, script.String())
	if err != nil {
		t.Fatal(err)
	}
	got, out := endedWithin(t, d, a.ID, 3*time.Minute)
	if got.State == kin.StateFailed || got.State == kin.StateCancelled || !strings.Contains(out, "\nEND") {
		t.Fatalf("the agent ended %s:\n%s", got.State, out)
	}
	if strings.Contains(out, upstreamKey) {
		t.Fatalf("the agent saw the upstream key:\n%s", out)
	}
	var want int64
	for _, c := range sdkCalls {
		want += c.tokens
		name := strings.Join(c.args, " ")
		line := lineAfter(out, "RESULT "+name+" ")
		r, err := modelsdktest.Parse([]byte(line), 0)
		if err != nil || !r.OK || r.Text != "ok" {
			t.Errorf("%s: %+v %v\n%s", name, r, err, out)
			continue
		}
		u := r.UsageMap()
		switch {
		case name == "chat-stream":
			// kin asked the upstream for the usage chunk and kept it.
			if u != nil {
				t.Errorf("%s: the SDK got kin's usage chunk: %v", name, u)
			}
		case strings.HasPrefix(name, "chat"):
			if u["prompt_tokens"] != 10.0 || u["completion_tokens"] != 5.0 {
				t.Errorf("%s: usage %v", name, u)
			}
		case strings.HasPrefix(name, "responses"):
			if u["input_tokens"] != 10.0 || u["output_tokens"] != 5.0 {
				t.Errorf("%s: usage %v", name, u)
			}
		default:
			if u["input_tokens"] != 10.0 || u["output_tokens"] != 5.0 || u["cache_read_input_tokens"] != 4.0 {
				t.Errorf("%s: usage %v", name, u)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	s := spendOf(t, d, a.ID)
	if s.Tokens != want || s.SubtreeTokens != want {
		t.Fatalf("spend %+v, want %d tokens", s, want)
	}
	// Prices per million: gpt-4o-mini 1 in, 2 out; claude-* 3 in, 0.3
	// cached in, 15 out.
	wantCost := 5*(10*1+5*2)/1e6 + 2*(10*3+4*0.3+5*15)/1e6
	if math.Abs(s.Cost-wantCost) > 1e-12 {
		t.Fatalf("cost %v, want %v", s.Cost, wantCost)
	}
	calls := modelCalls(t, d)
	if len(calls) != len(sdkCalls) {
		t.Fatalf("%d model.call events for %d calls: %+v", len(calls), len(sdkCalls), calls)
	}
	for i, c := range calls {
		if c.Agent != a.ID || c.Status != 200 || c.Tokens != sdkCalls[i].tokens {
			t.Errorf("call %v: model.call %+v", sdkCalls[i].args, c)
		}
	}
	reqs := up.Requests()
	if len(reqs) != len(sdkCalls) {
		t.Fatalf("%d upstream requests for %d calls", len(reqs), len(sdkCalls))
	}
	for _, r := range reqs {
		auth := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		if !strings.Contains(auth, upstreamKey) || strings.Contains(auth, "kin-gw1-") {
			t.Errorf("upstream request %s: auth %q", r.Path, auth)
		}
	}
}

// TestModelGatewayRealSDKsRefused: a subtree at its cap is refused with a
// 429 that each official SDK surfaces as the provider's error, with kin's
// code, and does not retry. The calls are made with the agent's
// environment from outside it: its subtree is stopped once exhausted.
func TestModelGatewayRealSDKsRefused(t *testing.T) {
	n := modelsdktest.Install(t)
	d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, Reply: "ok"})
	max := int64(20)
	a, err := sh(t, d, "spender", 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}}, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	cred := d.ModelCredential(a.ID)
	// The calls come from the agent's uid, as its own would (the gateway
	// binds a credential to it on the HTTP address).
	run := n.Run
	if uid, ok := d.Runner.AgentUID(a.ID); ok {
		run = func(t testing.TB, env []string, args ...string) modelsdktest.Result {
			return n.RunAsUID(t, uid, env, args...)
		}
	}
	env := []string{
		"OPENAI_BASE_URL=http://" + d.HTTPAddr() + "/v1", "OPENAI_API_KEY=" + cred,
		"ANTHROPIC_BASE_URL=http://" + d.HTTPAddr(), "ANTHROPIC_API_KEY=" + cred,
	}
	// 15 tokens, then the rest: the second call's output is capped to the
	// 5 left, which the SDK sees as a cut answer.
	if r := run(t, env, "chat-stream"); !r.OK || r.Text != "ok" {
		t.Fatalf("first call: %+v", r)
	}
	if r := run(t, env, "chat"); !r.OK {
		t.Fatalf("second call: %+v", r)
	}
	for _, c := range []struct {
		kind, errType string
	}{
		{"chat", "insufficient_quota"},
		{"chat-stream", "insufficient_quota"},
		{"responses-stream", "insufficient_quota"},
		{"messages", "rate_limit_error"},
		{"messages-stream", "rate_limit_error"},
	} {
		r := run(t, env, c.kind)
		if r.OK || r.Exit != 3 || r.HTTPStatus() != 429 {
			t.Errorf("%s at the cap: %+v", c.kind, r)
			continue
		}
		// OpenAI's SDK surfaces the body's error object; Anthropic's the
		// whole body.
		var e struct {
			Type, Code string
			Error      struct{ Type, Code string }
		}
		if err := json.Unmarshal(r.Error, &e); err != nil {
			t.Fatalf("%s: %v: %s", c.kind, err, r.Error)
		}
		typ, code := e.Type, e.Code
		if strings.HasPrefix(c.kind, "messages") {
			if e.Type != "error" {
				t.Errorf("%s: body type %q", c.kind, e.Type)
			}
			typ, code = e.Error.Type, e.Error.Code
		}
		if typ != c.errType || code != string(kin.ECodeBudget) || !strings.Contains(r.Message, "max_tokens") {
			t.Errorf("%s: type %q code %q, want %q and %q: %+v", c.kind, typ, code, c.errType, kin.ECodeBudget, r)
		}
	}
	if n := len(up.Requests()); n != 2 {
		t.Fatalf("%d calls reached the upstream, want 2 (the SDKs retried a refusal?)", n)
	}
	if s := spendOf(t, d, a.ID); s.Tokens != 30 {
		t.Fatalf("spend %+v, want 30", s)
	}
}

// endedWithin is ended with a longer deadline: Node starts slowly on a
// loaded machine.
func endedWithin(t *testing.T, d *kintest.Daemon, id kin.AgentID, within time.Duration) (*kin.Agent, string) {
	t.Helper()
	kintest.WaitFor(t, within, "agent to end", func() bool {
		a, _ := d.Client.Agent(ctx, id)
		return a != nil && a.State.Terminal()
	})
	return ended(t, d, id)
}

// lineAfter is the rest of the line that starts with prefix in out.
func lineAfter(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return rest
		}
	}
	return ""
}

// TestModelGatewayAgentCLIs runs Claude Code and Codex, the real CLIs from
// npm, inside an agent under a budget: each answers through kin with the
// environment kin gave it, offline, and the agent is metered exactly what
// the upstream reported. Claude Code reads ANTHROPIC_BASE_URL and
// ANTHROPIC_API_KEY unchanged; Codex 0.171 reads no OPENAI_BASE_URL, so
// the agent names kin's URL in a provider of its own with -c flags (the
// key still comes from OPENAI_API_KEY).
func TestModelGatewayAgentCLIs(t *testing.T) {
	clis := modelsdktest.InstallCLIs(t)
	for _, c := range []struct {
		name, script, path string
	}{
		{"claude-code", `exec "$CLI" -p "say ok" </dev/null`, "/v1/messages"},
		{"codex", `exec "$CLI" exec --skip-git-repo-check -m gpt-4o-mini -c model_provider='"kin"' \
	-c "model_providers.kin={name=\"kin\",base_url=\"$OPENAI_BASE_URL\",env_key=\"OPENAI_API_KEY\",wire_api=\"responses\"}" "say ok" </dev/null`, "/v1/responses"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, up := gatewayDaemon(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, Reply: "ok"})
			bin := clis.ClaudeCode
			if c.name == "codex" {
				bin = clis.Codex
			}
			// A home and a temporary directory of its own: the daemon's
			// are not the agent's to write.
			home := kintest.SharedDir(t)
			max := int64(1000)
			a, err := sh(t, d, c.name, 0, &kin.Policy{Budget: &kin.Budget{MaxTokens: &max}},
				"export HOME="+shellQuote(home)+" TMPDIR="+shellQuote(home)+" CLI="+shellQuote(bin)+"\ncd \"$HOME\"\n"+c.script)
			if err != nil {
				t.Fatal(err)
			}
			got, out := endedWithin(t, d, a.ID, 3*time.Minute)
			if got.EndReason != "exited" || got.Exit == nil || got.Exit.Code != 0 || !strings.Contains(out, "ok") {
				t.Fatalf("%s ended %s (%s, exit %v):\n%s", c.name, got.State, got.EndReason, got.Exit, out)
			}
			if strings.Contains(out, upstreamKey) {
				t.Fatalf("the agent saw the upstream key:\n%s", out)
			}
			var calls int64
			for _, r := range up.Requests() {
				auth := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
				if !strings.Contains(auth, upstreamKey) {
					t.Errorf("upstream request %s: auth %q", r.Path, auth)
				}
				if r.Method == "POST" && r.Path == c.path {
					calls++
				}
			}
			if calls == 0 {
				t.Fatalf("no %s call reached the upstream:\n%s", c.path, out)
			}
			if s := spendOf(t, d, a.ID); s.Tokens != 15*calls || s.Cost <= 0 {
				t.Fatalf("spend %+v for %d calls of 15 tokens", s, calls)
			}
			if mc := modelCalls(t, d); int64(len(mc)) != calls {
				t.Fatalf("%d model.call events for %d calls", len(mc), calls)
			}
			t.Logf("%s: %d model calls through kin, metered %d tokens", c.name, calls, 15*calls)
		})
	}
}
