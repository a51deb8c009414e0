package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// benchStreams are streams as internal/fakemodel sends them in
// BenchmarkGateway (its slow and paced rows: an Anthropic message of 20
// deltas; its fast row: an OpenAI chat completion with the usage chunk
// kin asks for).
var benchStreams = map[string]struct {
	ep   endpoint
	body string
}{
	"anthropic": {epMessages, anthropicBenchStream()},
	"chat":      {epChat, chatBenchStream()},
}

func anthropicBenchStream() string {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"message\":{\"content\":[],\"id\":\"msg_0123456789abcdef01234567\",\"model\":\"claude-3-5-haiku-latest\",\"role\":\"assistant\",\"stop_reason\":null,\"stop_sequence\":null,\"type\":\"message\",\"usage\":{\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"input_tokens\":10,\"output_tokens\":1,\"service_tier\":\"standard\"}},\"type\":\"message_start\"}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"content_block\":{\"text\":\"\",\"type\":\"text\"},\"index\":0,\"type\":\"content_block_start\"}\n\n")
	b.WriteString("event: ping\ndata: {\"type\":\"ping\"}\n\n")
	for range 20 {
		b.WriteString("event: content_block_delta\ndata: {\"delta\":{\"text\":\"x\",\"type\":\"text_delta\"},\"index\":0,\"type\":\"content_block_delta\"}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n")
	b.WriteString("event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"type\":\"message_delta\",\"usage\":{\"output_tokens\":20}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.String()
}

func chatBenchStream() string {
	chunk := func(choices, usage string) string {
		return "data: {\"choices\":" + choices + ",\"created\":1764230400,\"id\":\"chatcmpl-0123456789abcdef01234567\",\"model\":\"gpt-4o-mini\",\"object\":\"chat.completion.chunk\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_fakemodel\",\"usage\":" + usage + "}\n\n"
	}
	var b strings.Builder
	b.WriteString(chunk(`[{"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}]`, "null"))
	for _, c := range "hello world" {
		b.WriteString(chunk(fmt.Sprintf(`[{"delta":{"content":%q},"finish_reason":null,"index":0,"logprobs":null}]`, string(c)), "null"))
	}
	b.WriteString(chunk(`[{"delta":{},"finish_reason":"stop","index":0,"logprobs":null}]`, "null"))
	b.WriteString(chunk(`[]`, `{"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":15}`))
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkStreamEvents is kin's own work on one stream without the
// sockets: reading its events, finding its usage, writing them on, and
// its metering (to a mock authority): BenchmarkGateway's kin path less
// its system calls and net/http.
func BenchmarkStreamEvents(b *testing.B) {
	for _, name := range []string{"anthropic", "chat"} {
		s := benchStreams[name]
		b.Run(name, func(b *testing.B) {
			g, err := New(Config{Key: make([]byte, 32), Authority: &mockAuthority{}, Runs: func(kin.AgentID) bool { return true }})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest("POST", s.ep.path, nil)
			body := strings.NewReader(s.body)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			cpu0 := proctest.CPU()
			for b.Loop() {
				body.Reset(s.body)
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(body)}
				g.stream(w, req, s.ep, resp, &call{counted: true})
			}
			// The process's CPU (the garbage collector's included), which
			// the machine's other load moves less than the time.
			b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkRenamedRequestBody is what a request for "NAME/model" costs
// kin to forward as "model": its body encoded again from what kin read
// (before) or the new name spliced into the agent's bytes (after), for
// BenchmarkGateway's request and for a conversation of 100 messages.
func BenchmarkRenamedRequestBody(b *testing.B) {
	var conv strings.Builder
	conv.WriteString(`{"model":"paced/claude-3-5-haiku-latest","max_tokens":100,"stream":true,"messages":[`)
	for i := range 100 {
		if i > 0 {
			conv.WriteByte(',')
		}
		fmt.Fprintf(&conv, `{"role":"user","content":"message %d: %s"}`, i, strings.Repeat("lorem ipsum dolor sit amet ", 40))
	}
	conv.WriteString(`]}`)
	for _, c := range []struct{ name, body string }{
		{"bench", `{"model":"paced/claude-3-5-haiku-latest","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"conversation", conv.String()},
	} {
		for _, how := range []string{"encoded", "spliced"} {
			b.Run(c.name+"/"+how, func(b *testing.B) {
				body := []byte(c.body)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				cpu0 := proctest.CPU()
				for b.Loop() {
					var req map[string]json.RawMessage
					if err := json.Unmarshal(body, &req); err != nil {
						b.Fatal(err)
					}
					req["model"], _ = json.Marshal("claude-3-5-haiku-latest")
					var out []byte
					if how == "encoded" {
						out, _ = json.Marshal(req)
					} else {
						out, _ = spliceMembers(body, req, "model")
					}
					if len(out) == 0 {
						b.Fatal("no body")
					}
				}
				b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
