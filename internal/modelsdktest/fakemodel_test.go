package modelsdktest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/fakemodel"
	"github.com/kin-agents/kin/internal/modelsdktest"
)

// envFor is the environment kin gives an agent, pointed at url with key.
func envFor(url, key string) []string {
	return []string{
		"OPENAI_BASE_URL=" + url + "/v1", "OPENAI_API_KEY=" + key,
		"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=" + key,
	}
}

func num(t *testing.T, m map[string]any, want int, path ...string) {
	t.Helper()
	var v any = m
	for _, p := range path {
		o, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: no %q in %v", path, p, v)
		}
		v = o[p]
	}
	if v != float64(want) {
		t.Errorf("%v = %v, want %d", path, v, want)
	}
}

// TestSDKsAgainstFakeModel runs every call the scripts make against the
// fake upstream directly: the official SDKs take its answers (so the fake
// speaks the providers' wire shapes as the SDKs read them), and the
// scripts print what the tests through kin compare.
func TestSDKsAgainstFakeModel(t *testing.T) {
	n := modelsdktest.Install(t)
	s := fakemodel.Start(t, fakemodel.Options{Key: "upstream-secret", InputTokens: 10, OutputTokens: 5, CachedTokens: 2, Reply: "ok"})
	env := envFor(s.URL, "upstream-secret")

	for _, kind := range []string{"chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream"} {
		t.Run(kind, func(t *testing.T) {
			r := n.Run(t, env, kind)
			if !r.OK || r.Text != "ok" {
				t.Fatalf("%+v", r)
			}
			u := r.UsageMap()
			switch kind {
			case "chat":
				num(t, u, 10, "prompt_tokens")
				num(t, u, 5, "completion_tokens")
				num(t, u, 2, "prompt_tokens_details", "cached_tokens")
			case "chat-stream":
				// No include_usage asked: no usage chunk.
				if u != nil {
					t.Errorf("usage %v without include_usage", u)
				}
			case "responses", "responses-stream":
				num(t, u, 10, "input_tokens")
				num(t, u, 5, "output_tokens")
				num(t, u, 2, "input_tokens_details", "cached_tokens")
			case "messages", "messages-stream":
				num(t, u, 10, "input_tokens")
				num(t, u, 5, "output_tokens")
				num(t, u, 2, "cache_read_input_tokens")
			}
		})
	}
	t.Run("chat-stream-include-usage", func(t *testing.T) {
		r := n.Run(t, env, "chat-stream", "--include-usage")
		if !r.OK || r.Text != "ok" {
			t.Fatalf("%+v", r)
		}
		u := r.UsageMap()
		num(t, u, 10, "prompt_tokens")
		num(t, u, 5, "completion_tokens")
	})
	t.Run("max-tokens", func(t *testing.T) {
		r := n.Run(t, env, "chat", "--max-tokens", "1")
		num(t, r.UsageMap(), 1, "completion_tokens")
		if r.Finish != "length" || r.Text != "o" {
			t.Errorf("%+v", r)
		}
		r = n.Run(t, env, "messages-stream", "--max-tokens", "1")
		num(t, r.UsageMap(), 1, "output_tokens")
		if r.Stop != "max_tokens" {
			t.Errorf("%+v", r)
		}
		r = n.Run(t, env, "responses-stream", "--max-tokens", "1")
		num(t, r.UsageMap(), 1, "output_tokens")
		if r.Status != "incomplete" {
			t.Errorf("%+v", r)
		}
	})
	t.Run("embeddings", func(t *testing.T) {
		// The SDK asks for base64 and decodes it.
		r := n.Run(t, env, "embeddings")
		if !r.OK || r.Text != "2 embeddings of 8" {
			t.Fatalf("%+v", r)
		}
		num(t, r.UsageMap(), 10, "prompt_tokens")
	})
	t.Run("models", func(t *testing.T) {
		r := n.Run(t, env, "models")
		if !r.OK || !strings.Contains(r.Text, "gpt-4o-mini") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("count-tokens", func(t *testing.T) {
		r := n.Run(t, env, "count-tokens")
		if !r.OK {
			t.Fatalf("%+v", r)
		}
		num(t, r.UsageMap(), 10, "input_tokens")
	})
}

// TestSDKErrorsFromFakeModel: a wrong key and an upstream 429 reach the
// SDKs as the providers' errors, with their status and shape.
func TestSDKErrorsFromFakeModel(t *testing.T) {
	n := modelsdktest.Install(t)
	s := fakemodel.Start(t, fakemodel.Options{Key: "upstream-secret", InputTokens: 10, OutputTokens: 5})
	bad := envFor(s.URL, "wrong")
	for _, c := range []struct {
		kind, errType string
	}{
		{"chat", "invalid_request_error"},
		{"chat-stream", "invalid_request_error"},
		{"responses-stream", "invalid_request_error"},
		{"messages", "authentication_error"},
		{"messages-stream", "authentication_error"},
	} {
		r := n.Run(t, bad, c.kind)
		if r.OK || r.Exit != 3 || r.HTTPStatus() != 401 {
			t.Errorf("%s with a wrong key: %+v", c.kind, r)
			continue
		}
		if got := errType(t, c.kind, r.Error); got != c.errType {
			t.Errorf("%s: error type %q, want %q: %s", c.kind, got, c.errType, r.Error)
		}
	}

	good := envFor(s.URL, "upstream-secret")
	s.FailNext(2, 429, "", "the budget is spent")
	for _, c := range []struct{ kind, errType string }{
		{"chat-stream", "rate_limit_exceeded"},
		{"messages-stream", "rate_limit_error"},
	} {
		r := n.Run(t, good, c.kind)
		if r.OK || r.HTTPStatus() != 429 || !strings.Contains(r.Message, "the budget is spent") {
			t.Errorf("%s: %+v", c.kind, r)
		}
		if got := errType(t, c.kind, r.Error); got != c.errType {
			t.Errorf("%s: error type %q, want %q", c.kind, got, c.errType)
		}
	}
}

// errType is the error's type as the SDK surfaces it: OpenAI's
// error.type, Anthropic's body's error.type.
func errType(t *testing.T, kind string, raw json.RawMessage) string {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("%s: error %s: %v", kind, raw, err)
	}
	if strings.HasPrefix(kind, "messages") {
		if e.Type != "error" {
			t.Errorf("%s: body type %q, want error", kind, e.Type)
		}
		return e.Error.Type
	}
	return e.Type
}
