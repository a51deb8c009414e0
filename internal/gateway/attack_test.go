package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kin-agents/kin/kin"
)

// gatewayServer is a gateway with the mock authority on a real HTTP
// server, in front of a real upstream (up), as the daemon serves it.
func gatewayServer(t *testing.T, cfg Config, up http.HandlerFunc) (*Gateway, *httptest.Server) {
	t.Helper()
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	u, _ := url.Parse(us.URL)
	cfg.Upstreams = []Upstream{{Name: "openai", API: OpenAI, URL: u}}
	cfg.Key = make([]byte, 32)
	if cfg.Authority == nil {
		cfg.Authority = &mockAuthority{}
	}
	cfg.Runs = func(kin.AgentID) bool { return true }
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(g.TCP(http.NotFoundHandler()))
	t.Cleanup(s.Close)
	return g, s
}

// TestSlowBodyIsCutOff: a body dripped slowly (which holds a connection
// before any rate limit counts the call) is answered 408 once
// BodyTimeout has passed, in the provider's shape.
func TestSlowBodyIsCutOff(t *testing.T) {
	g, s := gatewayServer(t, Config{BodyTimeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a slow body reached the upstream")
	})
	conn, err := net.Dial("tcp", s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: kin\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{\"model\":", g.Credential(1))
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "did not arrive within") {
		t.Fatalf("a slow body: %d %s", resp.StatusCode, b)
	}
}

// TestHeadersBetweenAgentAndUpstream: hop-by-hop headers (those the
// Connection header names too) and X-Real-Ip do not reach the upstream;
// the upstream's headers naming the operator's account do not reach the
// agent.
func TestHeadersBetweenAgentAndUpstream(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	g, s := gatewayServer(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Openai-Organization", "operators-org")
		w.Header().Set("Openai-Project", "proj_operator")
		w.Header().Set("Anthropic-Organization-Id", "org-uuid")
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "1")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+g.Credential(1))
	req.Header.Set("Connection", "keep-alive, X-Hop")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("X-Real-Ip", "203.0.113.9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range []string{"X-Hop", "X-Real-Ip"} {
		if got.Get(h) != "" {
			t.Errorf("the upstream got the agent's %s", h)
		}
	}
	for _, h := range []string{"Openai-Organization", "Openai-Project", "Anthropic-Organization-Id", "X-Upstream-Hop"} {
		if resp.Header.Get(h) != "" {
			t.Errorf("the agent got the upstream's %s: %s", h, resp.Header.Get(h))
		}
	}
}

// FuzzRequestFields: whatever a request's fields, checking them and
// capping its output never panics, and a request they let through goes
// with output bounds within what is left, shared among its choices.
func FuzzRequestFields(f *testing.F) {
	f.Add(`{"model":"m","n":8,"max_tokens":1000}`, int64(20), 0)
	f.Add(`{"model":"m","stream":"true","max_completion_tokens":"5"}`, int64(1), 0)
	f.Add(`{"model":"m","max_output_tokens":3,"background":false}`, int64(5), 1)
	f.Add(`{"model":"m","max_tokens":null}`, int64(100), 2)
	f.Fuzz(func(t *testing.T, body string, left int64, which int) {
		eps := []endpoint{epChat, epResponses, epMessages, epEmbeddings}
		ep := eps[(which%4+4)%4]
		var req map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &req) != nil || req == nil || left < 1 {
			return
		}
		_ = badModelName(body)
		f, why := requestFields(req, ep)
		if why != "" {
			return
		}
		bound, _ := capOutput(req, ep, left, f.choices)
		if bound < 0 {
			t.Fatalf("bound %d", bound)
		}
		if ep.capKey == "" {
			return
		}
		var n int64 = 1
		if raw, ok := req["n"]; ok && ep == epChat {
			json.Unmarshal(raw, &n)
		}
		for _, k := range []string{ep.capKey, ep.alt} {
			var v int64
			if raw, ok := req[k]; ok && k != "" && json.Unmarshal(raw, &v) == nil && v*n > max(left, 16, n) {
				t.Fatalf("%s %d x %d choices with %d left: %s", k, v, n, left, body)
			}
		}
	})
}

// TestBodyGoesOnAsItCameUnlessAmbiguous: a request kin need not change
// reaches the upstream byte for byte (no second encoding per call); one
// that names a member twice, or names one in bytes that are not UTF-8,
// reaches it as kin read it, re-encoded: an upstream whose JSON parser
// keeps the first of two "model"s (or drops bad bytes from a name) must
// not read another model or bound than the one kin admitted.
func TestBodyGoesOnAsItCameUnlessAmbiguous(t *testing.T) {
	var mu sync.Mutex
	var got []byte
	g, s := gatewayServer(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	})
	send := func(body string) []byte {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.Credential(1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%q: status %d", body, resp.StatusCode)
		}
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	for _, body := range []string{
		`{"zeta": 1,  "model":"m", "messages":[{"role":"user","content":"model \"x\": {y}"}] }`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	} {
		if b := send(body); string(b) != body {
			t.Errorf("an unchanged body reached the upstream as %q, want %q", b, body)
		}
	}
	for body, want := range map[string]string{
		`{"model":"gpt-4o","messages":[],"model":"m"}`:                                              `{"messages":[],"model":"m"}`,
		`{"model":"m","stream_options":{"include_usage":false,"include_usage":true},"stream":true}`: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
		"{\"model\":\"m\",\"mo\xffdel\":\"gpt-4o\"}":                                                "{\"model\":\"m\",\"mo\ufffddel\":\"gpt-4o\"}",
	} {
		if b := send(body); string(b) != want {
			t.Errorf("an ambiguous body %q reached the upstream as %q, want kin's reading %q", body, b, want)
		}
	}
}

// FuzzUniqueMembers: where uniqueMembers lets a body go on as it came,
// its top level names each member once, in UTF-8, as a token by token
// reading finds them.
func FuzzUniqueMembers(f *testing.F) {
	f.Add(`{"a":1,"b":{"a":2},"c":["a","b"]}`)
	f.Add(`{"a":1,"a":2}`)
	f.Add(`{"a\u0062":1,"ab":2}`)
	f.Add("{\"\xff\":1}")
	f.Add(`{"s":"x\"y\\","t":"{\"a\":1}"}`)
	f.Fuzz(func(t *testing.T, body string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &m) != nil || m == nil {
			return
		}
		if !uniqueMembers([]byte(body), len(m)) {
			return
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.Token() // {
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("%q: %v", body, err)
			}
			name := k.(string)
			if seen[name] {
				t.Fatalf("%q: uniqueMembers let %q through twice", body, name)
			}
			seen[name] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%q: %v", body, err)
			}
		}
		if len(seen) != len(m) {
			t.Fatalf("%q: %d members read, %d decoded", body, len(seen), len(m))
		}
	})
}

// TestStreamEventNeverWaitsForTheNext: each event the upstream sends
// reaches the agent before the upstream sends the next (here the upstream
// waits for the agent to have it), a half-sent event included; a burst
// sent together arrives whole.
func TestStreamEventNeverWaitsForTheNext(t *testing.T) {
	got := make(chan string, 8) // never blocks the agent: a held event fails the test, not hangs it
	g, s := gatewayServer(t, Config{}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		send := func(chunk, want string) {
			io.WriteString(w, chunk)
			rc.Flush()
			select {
			case line := <-got:
				if line != want {
					t.Errorf("the agent read %q, want %q", line, want)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("the agent did not get %q before the upstream's next event", want)
			}
		}
		send("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", `data: {"choices":[{"delta":{"content":"a"}}]}`)
		// An event, and the start of the next one: the first goes on.
		send("data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho", `data: {"choices":[{"delta":{"content":"b"}}]}`)
		send("ices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n", `data: {"choices":[{"delta":{"content":"c"}}]}`)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"d\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	})
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+g.Credential(1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var rest []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if len(rest) == 0 && !strings.Contains(line, `"d"`) && line != "data: [DONE]" {
			got <- line
			continue
		}
		rest = append(rest, line)
	}
	if strings.Join(rest, "\n") != "data: {\"choices\":[{\"delta\":{\"content\":\"d\"}}]}\ndata: [DONE]" {
		t.Errorf("the burst arrived as %q (the usage chunk the agent did not ask for dropped)", rest)
	}
}

// meterGate is the mock authority, its ModelCall held until the test
// lets it go.
type meterGate struct {
	mockAuthority
	release chan struct{}
	held    chan bool // whether ModelCall had to wait the whole bound
}

func (m *meterGate) ModelCall(ctx context.Context, c kin.ModelCallData) (*kin.Spend, error) {
	select {
	case <-m.release:
		m.held <- false
	case <-time.After(5 * time.Second):
		m.held <- true
	}
	return m.mockAuthority.ModelCall(ctx, c)
}

// TestStreamDoesNotWaitForItsMetering: the events before the one a
// stream is metered on (its usage chunk, [DONE]) reach the agent before
// the metering's commit, even when they came in one burst with it.
func TestStreamDoesNotWaitForItsMetering(t *testing.T) {
	m := &meterGate{release: make(chan struct{}), held: make(chan bool, 1)}
	g, s := gatewayServer(t, Config{Authority: m}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	})
	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+g.Credential(1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) == 2 {
			close(m.release) // the content came before the metering ended
		}
	}
	if len(lines) != 3 || lines[2] != "data: [DONE]" {
		t.Fatalf("the stream: %q", lines)
	}
	if <-m.held {
		t.Fatal("the content waited for the call's metering")
	}
}

// flushCounter is a recorder that counts its flushes and what had been
// flushed when the call was metered.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
	sent    int // bytes flushed
}

func (f *flushCounter) Flush() {
	f.flushes++
	f.sent = f.Body.Len()
	f.ResponseRecorder.Flush()
}

// sentAtMetering is the mock authority noting how much of the stream had
// been flushed when the call was metered.
type sentAtMetering struct {
	mockAuthority
	w    *flushCounter
	sent int
}

func (m *sentAtMetering) ModelCall(ctx context.Context, c kin.ModelCallData) (*kin.Spend, error) {
	m.sent = m.w.sent
	return m.mockAuthority.ModelCall(ctx, c)
}

// TestStreamBurstFlushesOnceBeforeItsMeteringWithMockAuthority: a burst
// the upstream sent together goes on in one write up to the event the
// call is metered on (all of it sent before the commit: message_delta,
// which carries usage and commits nothing, is no reason for a write of its
// own), then that event: the headers, the burst, message_stop.
func TestStreamBurstFlushesOnceBeforeItsMeteringWithMockAuthority(t *testing.T) {
	burst := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	m := &sentAtMetering{w: w}
	g, err := New(Config{Key: make([]byte, 32), Authority: m, Runs: func(kin.AgentID) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(strings.NewReader(burst + stop))}
	g.stream(w, httptest.NewRequest("POST", epMessages.path, nil), epMessages, resp, &call{counted: true})
	if got := w.Body.String(); got != burst+stop {
		t.Fatalf("the stream went on as %q", got)
	}
	if m.sent != len(burst) {
		t.Errorf("at the metering %d bytes had been sent, want the %d before message_stop", m.sent, len(burst))
	}
	if len(m.calls) != 1 || m.calls[0].InputTokens != 7 || m.calls[0].OutputTokens != 3 {
		t.Errorf("metered %+v", m.calls)
	}
	if w.flushes != 3 {
		t.Errorf("%d flushes, want 3 (the headers, the burst before the metering, message_stop)", w.flushes)
	}
}

// TestStreamEndingWithItsLastEventIsNotFlushedTwiceWithMockAuthority: when
// the upstream's body ends with the bytes of its last event (net/http's
// body returns io.EOF with them when the last chunk came in the same
// read), nothing is left to wait for: the last event is not flushed on
// its own but goes out with the response's end (one write, not two).
// The events before the metering are flushed before it, as ever.
func TestStreamEndingWithItsLastEventIsNotFlushedTwiceWithMockAuthority(t *testing.T) {
	burst := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tc := range []struct {
		name    string
		body    io.Reader
		flushes int
	}{
		// The end read apart from the last event: message_stop is flushed
		// before the read that finds the end (it might wait).
		{"end apart", strings.NewReader(burst + stop), 3},
		// The end read with it: the headers and the burst before the
		// metering only.
		{"end with the last bytes", iotest.DataErrReader(strings.NewReader(burst + stop)), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
			m := &sentAtMetering{w: w}
			g, err := New(Config{Key: make([]byte, 32), Authority: m, Runs: func(kin.AgentID) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(tc.body)}
			g.stream(w, httptest.NewRequest("POST", epMessages.path, nil), epMessages, resp, &call{counted: true})
			if got := w.Body.String(); got != burst+stop {
				t.Fatalf("the stream went on as %q", got)
			}
			if m.sent != len(burst) {
				t.Errorf("at the metering %d bytes had been sent, want the %d before message_stop", m.sent, len(burst))
			}
			if w.flushes != tc.flushes {
				t.Errorf("%d flushes, want %d", w.flushes, tc.flushes)
			}
		})
	}
}
