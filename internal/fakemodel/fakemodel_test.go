package fakemodel_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fakemodel"
)

const key = "upstream-secret"

func start(t *testing.T, o fakemodel.Options) *fakemodel.Server {
	t.Helper()
	if o.Key == "" {
		o.Key = key
	}
	return fakemodel.Start(t, o)
}

// call makes one request with the provider's auth header and returns the
// response (its body to be read and closed by the caller).
func call(t *testing.T, s *fakemodel.Server, method, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(path, "/v1/messages") {
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// jsonOf reads a response's body as JSON, checking its status.
func jsonOf(t *testing.T, resp *http.Response, status int) map[string]any {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// at walks v by keys and indexes ("usage", "prompt_tokens"; "choices", 0).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", v, k)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("%v has no %q", m, k)
			}
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("%v: no element %d", v, k)
			}
			v = a[k]
		}
	}
	return v
}

func wantNum(t *testing.T, v any, want int, path ...any) {
	t.Helper()
	if got := at(t, v, path...); got != float64(want) {
		t.Errorf("%v = %v, want %d", path, got, want)
	}
}

func wantStr(t *testing.T, v any, want string, path ...any) {
	t.Helper()
	if got := at(t, v, path...); got != want {
		t.Errorf("%v = %v, want %q", path, got, want)
	}
}

type event struct {
	name string
	data string
}

// events reads a whole SSE stream.
func events(t *testing.T, resp *http.Response) []event {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var out []event
	sc := bufio.NewScanner(resp.Body)
	var e event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out = append(out, e)
			e = event{}
		case strings.HasPrefix(line, "event: "):
			e.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			e.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("not an SSE line: %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func dataOf(t *testing.T, e event) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(e.data), &v); err != nil {
		t.Fatalf("%v: %s", err, e.data)
	}
	return v
}

func TestChatCompletion(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 3, Reply: "hello"})
	v := jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`), 200)
	wantStr(t, v, "chat.completion", "object")
	wantStr(t, v, "gpt-4o-mini", "model")
	wantStr(t, v, "assistant", "choices", 0, "message", "role")
	wantStr(t, v, "hello", "choices", 0, "message", "content")
	wantStr(t, v, "stop", "choices", 0, "finish_reason")
	wantNum(t, v, 10, "usage", "prompt_tokens")
	wantNum(t, v, 5, "usage", "completion_tokens")
	wantNum(t, v, 15, "usage", "total_tokens")
	wantNum(t, v, 3, "usage", "prompt_tokens_details", "cached_tokens")
	if id := at(t, v, "id").(string); !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id %q", id)
	}

	// A limit below the output cuts it, and says so.
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","max_completion_tokens":2,"messages":[]}`), 200)
	wantNum(t, v, 2, "usage", "completion_tokens")
	wantNum(t, v, 12, "usage", "total_tokens")
	wantStr(t, v, "length", "choices", 0, "finish_reason")
	wantStr(t, v, "he", "choices", 0, "message", "content")
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","max_tokens":4,"messages":[]}`), 200)
	wantNum(t, v, 4, "usage", "completion_tokens")
	// A limit above it changes nothing.
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","max_tokens":400,"messages":[]}`), 200)
	wantNum(t, v, 5, "usage", "completion_tokens")
	wantStr(t, v, "stop", "choices", 0, "finish_reason")

	// stream_options without stream is refused, as OpenAI refuses it.
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","stream_options":{"include_usage":true},"messages":[]}`), 400)
	wantStr(t, v, "stream_options", "error", "param")
}

func TestChatCompletionStream(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 2, Reply: "hello", Chunks: 2})

	// Without include_usage: no usage anywhere.
	ev := events(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[]}`))
	if last := ev[len(ev)-1]; last.data != "[DONE]" || last.name != "" {
		t.Fatalf("last event %+v, want data: [DONE]", last)
	}
	ev = ev[:len(ev)-1]
	if len(ev) != 4 { // role, 2 deltas, finish
		t.Fatalf("%d chunks, want 4: %+v", len(ev), ev)
	}
	var text strings.Builder
	for i, e := range ev {
		c := dataOf(t, e)
		wantStr(t, c, "chat.completion.chunk", "object")
		if _, ok := c["usage"]; ok {
			t.Errorf("chunk %d has usage without include_usage: %s", i, e.data)
		}
		if s, ok := at(t, c, "choices", 0, "delta").(map[string]any)["content"].(string); ok {
			text.WriteString(s)
		}
	}
	wantStr(t, dataOf(t, ev[0]), "assistant", "choices", 0, "delta", "role")
	wantStr(t, dataOf(t, ev[3]), "stop", "choices", 0, "finish_reason")
	if text.String() != "hello" {
		t.Errorf("streamed %q, want hello", text.String())
	}

	// With include_usage: every chunk's usage is null but one more, last,
	// with no choices and the usage, before [DONE].
	ev = events(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[]}`))
	if ev[len(ev)-1].data != "[DONE]" {
		t.Fatalf("no [DONE]: %+v", ev)
	}
	ev = ev[:len(ev)-1]
	for _, e := range ev[:len(ev)-1] {
		if u := at(t, dataOf(t, e), "usage"); u != nil {
			t.Errorf("usage %v before the last chunk", u)
		}
	}
	u := dataOf(t, ev[len(ev)-1])
	if c := at(t, u, "choices").([]any); len(c) != 0 {
		t.Errorf("the usage chunk has choices %v", c)
	}
	wantNum(t, u, 10, "usage", "prompt_tokens")
	wantNum(t, u, 3, "usage", "completion_tokens")
	wantNum(t, u, 13, "usage", "total_tokens")
	wantNum(t, u, 2, "usage", "prompt_tokens_details", "cached_tokens")
	wantStr(t, dataOf(t, ev[len(ev)-2]), "length", "choices", 0, "finish_reason")
}

// TestStreamIsFlushedPerEvent reads a stream's first event while the
// server waits an hour before its first content chunk: it arrives only if
// each event is flushed as it is written.
func TestStreamIsFlushedPerEvent(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 1, OutputTokens: 1, ChunkDelay: time.Hour})
	for _, c := range []struct{ path, body, first string }{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, `"role":"assistant"`},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, "response.created"},
		{"/v1/messages", `{"model":"m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, "message_start"},
	} {
		resp := call(t, s, "POST", c.path, c.body)
		got := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(resp.Body).ReadString('\n')
			got <- line
		}()
		select {
		case line := <-got:
			if !strings.Contains(line, c.first) {
				t.Errorf("%s: first line %q, want %s", c.path, line, c.first)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event within 10s: the stream is buffered", c.path)
		}
		resp.Body.Close()
	}
	// The server is not stuck in the hour's wait: Close returns (the
	// test's cleanup would hang otherwise).
}

// TestPacedChunksNeverComeEarly: content chunk i of a stream
// paced ChunkDelay apart is never sent before i×ChunkDelay after the
// request (a schedule, not a burst), and the chunks come in order.
func TestPacedChunksNeverComeEarly(t *testing.T) {
	const delay = 20 * time.Millisecond
	s := start(t, fakemodel.Options{InputTokens: 1, OutputTokens: 4, Reply: "abcd", Chunks: 4, ChunkDelay: delay})
	t0 := time.Now()
	resp := call(t, s, "POST", "/v1/messages", `{"model":"m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	br := bufio.NewReader(resp.Body)
	var text strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if !strings.HasPrefix(line, "data: ") || !strings.Contains(line, `"text_delta"`) {
			continue
		}
		at := time.Since(t0)
		var d struct {
			Delta struct{ Text string } `json:"delta"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		text.WriteString(d.Delta.Text)
		if due := time.Duration(text.Len()) * delay; at < due {
			t.Errorf("chunk %d came %v after the request, before its time %v", text.Len(), at, due)
		}
	}
	if text.String() != "abcd" {
		t.Errorf("streamed %q, want abcd", text.String())
	}
}

func TestResponses(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 4, Reply: "hello"})
	v := jsonOf(t, call(t, s, "POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"hi"}`), 200)
	wantStr(t, v, "response", "object")
	wantStr(t, v, "completed", "status")
	wantStr(t, v, "message", "output", 0, "type")
	wantStr(t, v, "output_text", "output", 0, "content", 0, "type")
	wantStr(t, v, "hello", "output", 0, "content", 0, "text")
	wantNum(t, v, 10, "usage", "input_tokens")
	wantNum(t, v, 4, "usage", "input_tokens_details", "cached_tokens")
	wantNum(t, v, 5, "usage", "output_tokens")
	wantNum(t, v, 15, "usage", "total_tokens")

	v = jsonOf(t, call(t, s, "POST", "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":3}`), 200)
	wantStr(t, v, "incomplete", "status")
	wantStr(t, v, "max_output_tokens", "incomplete_details", "reason")
	wantNum(t, v, 3, "usage", "output_tokens")
}

func TestResponsesStream(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 4, Reply: "hello", Chunks: 2})
	ev := events(t, call(t, s, "POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"hi","stream":true}`))
	var names []string
	var text strings.Builder
	for i, e := range ev {
		d := dataOf(t, e)
		wantStr(t, d, e.name, "type")
		wantNum(t, d, i, "sequence_number")
		names = append(names, e.name)
		if e.name == "response.output_text.delta" {
			text.WriteString(at(t, d, "delta").(string))
		}
	}
	want := []string{
		"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events %q, want %q", names, want)
	}
	if text.String() != "hello" {
		t.Errorf("streamed %q", text.String())
	}
	if u := at(t, dataOf(t, ev[0]), "response", "usage"); u != nil {
		t.Errorf("response.created has usage %v", u)
	}
	last := dataOf(t, ev[len(ev)-1])
	wantStr(t, last, "completed", "response", "status")
	wantNum(t, last, 10, "response", "usage", "input_tokens")
	wantNum(t, last, 4, "response", "usage", "input_tokens_details", "cached_tokens")
	wantNum(t, last, 5, "response", "usage", "output_tokens")

	// Cut by max_output_tokens, it ends with response.incomplete.
	ev = events(t, call(t, s, "POST", "/v1/responses", `{"model":"m","input":"hi","stream":true,"max_output_tokens":2}`))
	last = dataOf(t, ev[len(ev)-1])
	wantStr(t, last, "response.incomplete", "type")
	wantNum(t, last, 2, "response", "usage", "output_tokens")
}

func TestEmbeddings(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 7})
	v := jsonOf(t, call(t, s, "POST", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"],"dimensions":3}`), 200)
	wantStr(t, v, "list", "object")
	wantNum(t, v, 7, "usage", "prompt_tokens")
	wantNum(t, v, 7, "usage", "total_tokens")
	wantStr(t, v, "embedding", "data", 1, "object")
	wantNum(t, v, 1, "data", 1, "index")
	floats := at(t, v, "data", 0, "embedding").([]any)
	if len(floats) != 3 {
		t.Fatalf("embedding %v, want 3 dimensions", floats)
	}
	// base64 (what the openai SDK asks for by default): little-endian
	// float32s, the same numbers.
	v = jsonOf(t, call(t, s, "POST", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"a","dimensions":3,"encoding_format":"base64"}`), 200)
	b, err := base64.StdEncoding.DecodeString(at(t, v, "data", 0, "embedding").(string))
	if err != nil || len(b) != 12 {
		t.Fatalf("base64 embedding: %v, %d bytes", err, len(b))
	}
	for i := range 3 {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != float32(floats[i].(float64)) {
			t.Errorf("dimension %d: base64 %v, float %v", i, got, floats[i])
		}
	}
	if len(at(t, v, "data").([]any)) != 1 {
		t.Errorf("one input, %v", at(t, v, "data"))
	}
	v = jsonOf(t, call(t, s, "POST", "/v1/embeddings", `{"model":"m","input":[]}`), 400)
	wantStr(t, v, "input", "error", "param")
}

func TestModels(t *testing.T) {
	s := start(t, fakemodel.Options{Models: []string{"gpt-x", "claude-y"}})
	v := jsonOf(t, call(t, s, "GET", "/v1/models", ""), 200)
	wantStr(t, v, "list", "object")
	wantStr(t, v, "gpt-x", "data", 0, "id")
	wantStr(t, v, "model", "data", 0, "object")
	v = jsonOf(t, call(t, s, "GET", "/v1/models/claude-y", ""), 200)
	wantStr(t, v, "claude-y", "id")

	// Anthropic's client asks with its headers and gets its shape.
	v = jsonOf(t, call(t, s, "GET", "/v1/models", "", "Authorization", "", "x-api-key", key, "anthropic-version", "2023-06-01"), 200)
	wantStr(t, v, "model", "data", 1, "type")
	wantStr(t, v, "claude-y", "last_id")
	if hm := at(t, v, "has_more"); hm != false {
		t.Errorf("has_more %v", hm)
	}

	// A model not listed is refused, in each provider's shape.
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"gpt-z","messages":[]}`), 404)
	wantStr(t, v, "model_not_found", "error", "code")
	v = jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"claude-z","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`), 404)
	wantStr(t, v, "not_found_error", "error", "type")
	jsonOf(t, call(t, s, "GET", "/v1/models/gpt-z", ""), 404)
}

func TestMessages(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 3, CacheCreationTokens: 2, Reply: "hello"})
	body := `{"model":"claude-3-5-haiku-latest","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	v := jsonOf(t, call(t, s, "POST", "/v1/messages", body), 200)
	wantStr(t, v, "message", "type")
	wantStr(t, v, "assistant", "role")
	wantStr(t, v, "claude-3-5-haiku-latest", "model")
	wantStr(t, v, "text", "content", 0, "type")
	wantStr(t, v, "hello", "content", 0, "text")
	wantStr(t, v, "end_turn", "stop_reason")
	wantNum(t, v, 10, "usage", "input_tokens")
	wantNum(t, v, 5, "usage", "output_tokens")
	wantNum(t, v, 3, "usage", "cache_read_input_tokens")
	wantNum(t, v, 2, "usage", "cache_creation_input_tokens")
	if id := at(t, v, "id").(string); !strings.HasPrefix(id, "msg_") {
		t.Errorf("id %q", id)
	}

	v = jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`), 200)
	wantStr(t, v, "max_tokens", "stop_reason")
	wantNum(t, v, 2, "usage", "output_tokens")

	// max_tokens is required, as Anthropic requires it.
	v = jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 400)
	wantStr(t, v, "error", "type")
	wantStr(t, v, "invalid_request_error", "error", "type")
	wantStr(t, v, "max_tokens: Field required", "error", "message")

	v = jsonOf(t, call(t, s, "POST", "/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), 200)
	wantNum(t, v, 10, "input_tokens")
}

func TestMessagesStream(t *testing.T) {
	s := start(t, fakemodel.Options{InputTokens: 10, OutputTokens: 5, CachedTokens: 3, CacheCreationTokens: 2, Reply: "hello", Chunks: 2})
	ev := events(t, call(t, s, "POST", "/v1/messages", `{"model":"claude-3-5-haiku-latest","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`))
	var names []string
	var text strings.Builder
	for _, e := range ev {
		d := dataOf(t, e)
		wantStr(t, d, e.name, "type")
		names = append(names, e.name)
		if e.name == "content_block_delta" {
			wantStr(t, d, "text_delta", "delta", "type")
			text.WriteString(at(t, d, "delta", "text").(string))
		}
	}
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events %q, want %q", names, want)
	}
	if text.String() != "hello" {
		t.Errorf("streamed %q", text.String())
	}
	start := dataOf(t, ev[0])
	wantNum(t, start, 10, "message", "usage", "input_tokens")
	wantNum(t, start, 3, "message", "usage", "cache_read_input_tokens")
	wantNum(t, start, 2, "message", "usage", "cache_creation_input_tokens")
	wantNum(t, start, 1, "message", "usage", "output_tokens")
	delta := dataOf(t, ev[6])
	wantNum(t, delta, 5, "usage", "output_tokens")
	wantStr(t, delta, "end_turn", "delta", "stop_reason")

	ev = events(t, call(t, s, "POST", "/v1/messages", `{"model":"m","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	delta = dataOf(t, ev[len(ev)-2])
	wantNum(t, delta, 3, "usage", "output_tokens")
	wantStr(t, delta, "max_tokens", "delta", "stop_reason")
}

// TestWrongKey: each provider's 401 and shape, for a wrong key and for
// none, and the key in the other provider's header is no key.
func TestWrongKey(t *testing.T) {
	s := start(t, fakemodel.Options{})
	for _, h := range [][]string{
		{"Authorization", "Bearer wrong"},
		{"Authorization", ""},
		{"Authorization", key}, // no Bearer
		{"Authorization", "", "x-api-key", key},
	} {
		v := jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, h...), 401)
		wantStr(t, v, "invalid_request_error", "error", "type")
		wantStr(t, v, "invalid_api_key", "error", "code")
		if p := at(t, v, "error", "param"); p != nil {
			t.Errorf("param %v", p)
		}
		if m := at(t, v, "error", "message").(string); strings.Contains(m, "wrong") {
			t.Errorf("the message repeats the key: %q", m)
		}
	}
	for _, h := range [][]string{
		{"x-api-key", "wrong"},
		{"x-api-key", ""},
		{"x-api-key", "", "Authorization", key}, // no Bearer
		{"x-api-key", "", "Authorization", "Bearer wrong"},
	} {
		v := jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, h...), 401)
		wantStr(t, v, "error", "type")
		wantStr(t, v, "authentication_error", "error", "type")
		wantStr(t, v, "invalid x-api-key", "error", "message")
	}
	// Anthropic's SDK 1.x sends the key as a bearer token.
	jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`,
		"x-api-key", "", "Authorization", "Bearer "+key), 200)
	// Without a Key, anything goes.
	open := fakemodel.Start(t, fakemodel.Options{})
	jsonOf(t, call(t, open, "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, "Authorization", ""), 200)
}

func TestBadRequests(t *testing.T) {
	s := start(t, fakemodel.Options{})
	v := jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":`), 400)
	wantStr(t, v, "invalid_request_error", "error", "type")
	v = jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"messages":[]}`), 400)
	wantStr(t, v, "model", "error", "param")
	v = jsonOf(t, call(t, s, "POST", "/v1/messages", `[]`), 400)
	wantStr(t, v, "invalid_request_error", "error", "type")
	// An unknown path is a 404 before any key is looked at (Claude Code
	// probes HEAD /api/hello).
	resp404 := call(t, s, "HEAD", "/api/hello", "", "Authorization", "")
	if resp404.StatusCode != 404 {
		t.Errorf("HEAD /api/hello: %d, want 404", resp404.StatusCode)
	}
	v = jsonOf(t, call(t, s, "POST", "/v1/completions", `{}`), 404)
	wantStr(t, v, "Invalid URL (POST /v1/completions)", "error", "message")
	v = jsonOf(t, call(t, s, "POST", "/v1/messages/batches", `{}`), 404)
	wantStr(t, v, "not_found_error", "error", "type")
	resp := call(t, s, "GET", "/v1/chat/completions", "")
	if resp.Header.Get("Allow") != "POST" {
		t.Errorf("Allow %q", resp.Header.Get("Allow"))
	}
	jsonOf(t, resp, 405)

	for _, o := range []fakemodel.Options{{InputTokens: -1}, {ChunkDelay: -time.Second}, {Chunks: -2}} {
		if _, err := fakemodel.Listen("127.0.0.1:0", o); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("Listen(%+v): %v, want an error naming the negative field", o, err)
		}
	}
}

// TestLog: a line per call, with its status and body, and streams still
// flushed through the logging writer.
func TestLog(t *testing.T) {
	var log syncBuffer
	s := start(t, fakemodel.Options{Log: &log, InputTokens: 1, OutputTokens: 1, ChunkDelay: time.Hour})
	jsonOf(t, call(t, s, "POST", "/v1/chat/completions?x=1", `{"model":"m","messages":[]}`), 200)
	jsonOf(t, call(t, s, "POST", "/v1/messages", `{}`, "x-api-key", "wrong"), 401)
	resp := call(t, s, "POST", "/v1/messages", `{"model":"m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Errorf("first line %q, %v: the stream is not flushed through the log's writer", line, err)
	}
	resp.Body.Close()
	want := "POST /v1/chat/completions?x=1 200 {\"model\":\"m\",\"messages\":[]}\nPOST /v1/messages 401 {}\n"
	if got := log.String(); !strings.HasPrefix(got, want) {
		t.Errorf("log:\n%s\nwant it to start with:\n%s", got, want)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestFailNext(t *testing.T) {
	s := start(t, fakemodel.Options{})
	s.FailNext(1, 429, "", "slow down")
	s.FailNext(1, 429, "", "slow down")
	v := jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`), 429)
	wantStr(t, v, "rate_limit_exceeded", "error", "type")
	wantStr(t, v, "slow down", "error", "message")
	v = jsonOf(t, call(t, s, "POST", "/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`), 429)
	wantStr(t, v, "rate_limit_error", "error", "type")
	jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`), 200)
}

func TestRequests(t *testing.T) {
	s := start(t, fakemodel.Options{})
	jsonOf(t, call(t, s, "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, "X-Trace", "1"), 200)
	jsonOf(t, call(t, s, "GET", "/v1/models", ""), 200)
	got := s.Requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if got[0].Method != "POST" || got[0].Path != "/v1/chat/completions" || got[0].Header.Get("X-Trace") != "1" ||
		got[0].Header.Get("Authorization") != "Bearer "+key || !bytes.Equal(got[0].Body, []byte(`{"model":"m","messages":[]}`)) {
		t.Errorf("first request %+v", got[0])
	}
	if got[1].Method != "GET" || got[1].Path != "/v1/models" {
		t.Errorf("second request %+v", got[1])
	}
	// A copy: changing it changes nothing recorded.
	got[0].Body[0] = 'x'
	if s.Requests()[0].Body[0] != '{' {
		t.Error("Requests shares its bodies")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// FuzzServe posts anything to every endpoint: the server answers with a
// status and, when it is not a stream, JSON in the provider's shape; it
// never panics.
func FuzzServe(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","messages":[]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":1}`,
		`{"model":"m","input":[[1,2],[3]],"encoding_format":"base64","dimensions":2}`,
		`{"model":"m","max_tokens":0,"messages":null}`,
		`{"model":"m","max_output_tokens":-3,"input":"x","stream":true}`,
		`not json`, ``,
	} {
		for p := range 6 {
			f.Add(uint8(p), seed)
		}
	}
	s, err := fakemodel.Listen("127.0.0.1:0", fakemodel.Options{InputTokens: 3, OutputTokens: 4, Reply: "héllo", NoRecord: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	paths := []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages", "/v1/messages/count_tokens", "/v1/models"}
	f.Fuzz(func(t *testing.T, p uint8, body string) {
		path := paths[int(p)%len(paths)]
		method := "POST"
		if path == "/v1/models" {
			method = "GET"
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		if rec.Code != 200 && (rec.Code < 400 || rec.Code > 499) {
			t.Fatalf("%s %q: status %d", path, body, rec.Code)
		}
		if rec.Header().Get("Content-Type") == "text/event-stream" {
			return
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s %q: %v: %s", path, body, err, rec.Body)
		}
		if rec.Code != 200 {
			if _, ok := v["error"].(map[string]any); !ok {
				t.Fatalf("%s %q: an error without the provider's shape: %s", path, body, rec.Body)
			}
		}
	})
}
