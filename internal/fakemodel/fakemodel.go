package fakemodel

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options is what every call is answered with.
//
// The token counts are reported as each API's fields say them, unchanged:
// OpenAI's prompt_tokens (input_tokens in the Responses API) is
// InputTokens, of which cached_tokens (CachedTokens) is a part; Anthropic's
// input_tokens is InputTokens and its cache_read_input_tokens
// (CachedTokens) and cache_creation_input_tokens (CacheCreationTokens) come
// on top, as Anthropic counts them. A request's output limit (max_tokens,
// max_completion_tokens, max_output_tokens) lowers the output reported to
// it, and the reply is cut to as many runes.
type Options struct {
	// Key is the API key every call must carry (OpenAI: "Authorization:
	// Bearer KEY"; Anthropic: "x-api-key: KEY" or, as @anthropic-ai/sdk
	// 1.x sends it, "Authorization: Bearer KEY"). Empty, any key or none
	// is taken.
	Key string

	InputTokens         int
	OutputTokens        int
	CachedTokens        int
	CacheCreationTokens int // Anthropic only

	// Reply is the assistant's text ("ok" when empty).
	Reply string

	// Chunks is how many content deltas a streamed reply is cut into
	// (default: one per rune of Reply). ChunkDelay paces them as a
	// provider does: content chunk i (from 1) is due i×ChunkDelay after
	// the stream's headers, on a schedule of its own. A chunk written late
	// (this host busy) does not push the next one back, as a provider's
	// model does not generate slower because its client's host is busy.
	Chunks     int
	ChunkDelay time.Duration

	// Models are the models /v1/models lists and calls may name; empty,
	// any model is taken and DefaultModels are listed.
	Models []string

	// NoRecord keeps no Requests (for benchmarks).
	NoRecord bool

	// Log, when set, gets a line per call: its method, path, status and
	// body (for seeing what a tool sends).
	Log io.Writer
}

// DefaultModels are listed by /v1/models when Options.Models is empty.
var DefaultModels = []string{"gpt-4o-mini", "text-embedding-3-small", "claude-3-5-haiku-latest"}

// Request is one request the server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// TB is the part of testing.TB Start uses (so the package links no
// testing into kin's binary: "kin dev fake-model" serves it too).
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Server is a running fake provider.
type Server struct {
	// URL is the server's base, http://127.0.0.1:PORT, without /v1.
	URL string

	opts Options
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed once Serve returned

	mu       sync.Mutex
	requests []Request
	fail     []failure // answered instead of a reply, first first
	closed   bool
}

type failure struct {
	status  int
	errType string
	message string
}

// Start starts a server on 127.0.0.1:0, closed when the test ends.
func Start(t TB, o Options) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", o)
	if err != nil {
		t.Fatalf("fakemodel: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Listen starts a server on addr (host:port; port 0 picks one).
func Listen(addr string, o Options) (*Server, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Reply == "" {
		o.Reply = "ok"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{
		URL:  "http://" + ln.Addr().String(),
		opts: o,
		ln:   ln,
		done: make(chan struct{}),
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (o Options) validate() error {
	for name, n := range map[string]int{
		"InputTokens": o.InputTokens, "OutputTokens": o.OutputTokens,
		"CachedTokens": o.CachedTokens, "CacheCreationTokens": o.CacheCreationTokens,
		"Chunks": o.Chunks,
	} {
		if n < 0 {
			return fmt.Errorf("fakemodel: %s is %d: it cannot be negative", name, n)
		}
	}
	if o.ChunkDelay < 0 {
		return fmt.Errorf("fakemodel: ChunkDelay is %v: it cannot be negative", o.ChunkDelay)
	}
	return nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, ending streams in flight, and waits for it.
// Calling it twice is safe.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.srv.Close()
	<-s.done
	return err
}

// Shutdown stops taking connections and waits for calls in flight, until
// ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.srv.Shutdown(ctx)
	if err == nil {
		<-s.done
	}
	return err
}

// Requests are the requests received so far, oldest first (none with
// Options.NoRecord).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = Request{Method: r.Method, Path: r.Path, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
	}
	return out
}

// FailNext answers the next n calls to a model endpoint (after the key is
// checked) with status and the provider's error shape instead of a reply:
// errType is the error's type ("" picks the provider's for status, e.g.
// rate_limit_error for 429), message its message.
func (s *Server) FailNext(n, status int, errType, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fail = append(s.fail, failure{status: status, errType: errType, message: message})
	}
}

func (s *Server) nextFailure() (failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fail) == 0 {
		return failure{}, false
	}
	f := s.fail[0]
	s.fail = s.fail[1:]
	return f, true
}

// maxBody bounds a request body: far above any test's prompt.
const maxBody = 32 << 20

// api is which provider's shapes a request is answered in.
type api int

const (
	openAI api = iota
	anthropic
)

// apiOf says which provider a path (and, for /v1/models, which both
// have, the headers) belongs to.
func apiOf(r *http.Request) api {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return anthropic
	}
	if r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/") {
		if r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "" {
			return anthropic
		}
	}
	return openAI
}

// ServeHTTP answers one call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Log == nil {
		s.serve(w, r)
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.serve(sw, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.opts.Log, "%s %s %d %s\n", r.Method, r.URL.RequestURI(), sw.status, sw.body)
}

// statusWriter remembers a response's status and the request's body, for
// Options.Log.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if sw, ok := w.(*statusWriter); ok {
		sw.body = body
	}
	p := apiOf(r)
	if p == anthropic {
		w.Header().Set("request-id", "req_"+randomID())
	} else {
		w.Header().Set("x-request-id", "req_"+randomID())
	}
	if !s.opts.NoRecord {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
	}
	if err != nil {
		writeError(w, p, http.StatusRequestEntityTooLarge, "", "request body: "+err.Error(), "")
		return
	}
	var handle func(http.ResponseWriter, *http.Request, []byte)
	method := http.MethodPost
	switch r.URL.Path {
	case "/v1/chat/completions":
		handle = s.chatCompletions
	case "/v1/responses":
		handle = s.responses
	case "/v1/embeddings":
		handle = s.embeddings
	case "/v1/messages":
		handle = s.messages
	case "/v1/messages/count_tokens":
		handle = s.countTokens
	case "/v1/models":
		handle, method = s.models, http.MethodGet
	default:
		if m, ok := strings.CutPrefix(r.URL.Path, "/v1/models/"); ok && m != "" {
			handle, method = s.model, http.MethodGet
			break
		}
		if p == anthropic {
			writeError(w, p, http.StatusNotFound, "not_found_error", "Not Found", "")
		} else {
			writeError(w, p, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), "")
		}
		return
	}
	// The path is known: now the key, then the method.
	if !s.authorized(r, p) {
		if p == anthropic {
			writeError(w, p, http.StatusUnauthorized, "authentication_error", "invalid x-api-key", "")
		} else {
			writeError(w, p, http.StatusUnauthorized, "invalid_request_error",
				"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_api_key")
		}
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, p, http.StatusMethodNotAllowed, "invalid_request_error",
			fmt.Sprintf("%s %s: the method must be %s", r.Method, r.URL.Path, method), "")
		return
	}
	if method == http.MethodPost {
		if f, ok := s.nextFailure(); ok {
			writeError(w, p, f.status, f.errType, f.message, "")
			return
		}
	}
	handle(w, r, body)
}

func (s *Server) authorized(r *http.Request, p api) bool {
	if s.opts.Key == "" {
		return true
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	bearer = cmp.Or(bearer, "\x00") // no header is no key
	if p == anthropic {
		// @anthropic-ai/sdk 1.x (API version 2026-10-21) sends the API
		// key as a bearer token; older clients and curl send x-api-key.
		return r.Header.Get("x-api-key") == s.opts.Key || ok && bearer == s.opts.Key
	}
	return ok && bearer == s.opts.Key
}

// modelAllowed says whether a call may name model, and answers it when not.
func (s *Server) modelAllowed(w http.ResponseWriter, p api, model string) bool {
	if model == "" {
		if p == anthropic {
			writeError(w, p, http.StatusBadRequest, "invalid_request_error", "model: Field required", "")
		} else {
			writeErrorParam(w, http.StatusBadRequest, "invalid_request_error", "you must provide a model parameter", "model", "")
		}
		return false
	}
	if len(s.opts.Models) == 0 {
		return true
	}
	for _, m := range s.opts.Models {
		if m == model {
			return true
		}
	}
	if p == anthropic {
		writeError(w, p, http.StatusNotFound, "not_found_error", "model: "+model)
		return false
	}
	writeErrorParam(w, http.StatusNotFound, "invalid_request_error",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model), "", "model_not_found")
	return false
}

// decode reads a request body as JSON into v, answering a bad one.
func decode(w http.ResponseWriter, p api, body []byte, v any) bool {
	if err := json.Unmarshal(body, v); err != nil {
		if p == anthropic {
			writeError(w, p, http.StatusBadRequest, "invalid_request_error", "The request body is not valid JSON: "+err.Error(), "")
		} else {
			writeError(w, p, http.StatusBadRequest, "invalid_request_error",
				"We could not parse the JSON body of your request: "+err.Error(), "")
		}
		return false
	}
	return true
}

// defaultErrType is the provider's error type for status.
func defaultErrType(p api, status int) string {
	if p == anthropic {
		switch status {
		case http.StatusBadRequest:
			return "invalid_request_error"
		case http.StatusUnauthorized:
			return "authentication_error"
		case http.StatusForbidden:
			return "permission_error"
		case http.StatusNotFound:
			return "not_found_error"
		case http.StatusRequestEntityTooLarge:
			return "request_too_large"
		case http.StatusTooManyRequests:
			return "rate_limit_error"
		case 529:
			return "overloaded_error"
		default:
			return "api_error"
		}
	}
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// writeError answers with the provider's error shape: OpenAI's
// {"error":{"message","type","param","code"}}, Anthropic's
// {"type":"error","error":{"type","message"}}. code is OpenAI's only.
func writeError(w http.ResponseWriter, p api, status int, errType, message string, code ...string) {
	if errType == "" {
		errType = defaultErrType(p, status)
	}
	if p == anthropic {
		writeJSON(w, status, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": errType, "message": message},
		})
		return
	}
	c := ""
	if len(code) > 0 {
		c = code[0]
	}
	writeErrorParam(w, status, errType, message, "", c)
}

func writeErrorParam(w http.ResponseWriter, status int, errType, message, param, code string) {
	e := map[string]any{"message": message, "type": errType, "param": nil, "code": nil}
	if param != "" {
		e["param"] = param
	}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// stream writes server-sent events, each flushed as it is written.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	delay time.Duration
	due   time.Time   // when the last content chunk was due (its schedule)
	timer *time.Timer // wait's, made at its first wait
}

func (s *Server) startStream(w http.ResponseWriter, r *http.Request) *stream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st := &stream{w: w, rc: http.NewResponseController(w), ctx: r.Context(), delay: s.opts.ChunkDelay}
	_ = st.rc.Flush()
	st.due = time.Now()
	return st
}

// wait waits for the next content chunk's time on the stream's schedule
// (ChunkDelay after the last one's due time, not after its write); false
// when the client left.
func (st *stream) wait() bool {
	if st.delay <= 0 {
		return st.ctx.Err() == nil
	}
	st.due = st.due.Add(st.delay)
	left := time.Until(st.due)
	if left <= 0 {
		return st.ctx.Err() == nil
	}
	if st.timer == nil {
		st.timer = time.NewTimer(left)
	} else {
		st.timer.Reset(left) // fired and drained: a stream waits once at a time
	}
	select {
	case <-st.timer.C:
		return true
	case <-st.ctx.Done():
		st.timer.Stop()
		return false
	}
}

// event writes one event: "event: NAME" when name is set, then its data.
func (st *stream) event(name string, data any) error {
	var b []byte
	switch d := data.(type) {
	case string:
		b = []byte(d)
	default:
		var err error
		if b, err = json.Marshal(d); err != nil {
			return err
		}
	}
	return st.raw(name, b)
}

// raw writes one event whose data b is encoded already.
func (st *stream) raw(name string, b []byte) error {
	var buf bytes.Buffer
	if name != "" {
		buf.WriteString("event: ")
		buf.WriteString(name)
		buf.WriteByte('\n')
	}
	buf.WriteString("data: ")
	buf.Write(b)
	buf.WriteString("\n\n")
	if _, err := st.w.Write(buf.Bytes()); err != nil {
		return err
	}
	return st.rc.Flush()
}

// output is what a call is answered: the tokens out and the reply, cut to
// limit (0: none) when it is below OutputTokens.
func (s *Server) output(limit int) (tokens int, reply string, capped bool) {
	tokens, reply = s.opts.OutputTokens, s.opts.Reply
	if limit > 0 && limit < tokens {
		tokens, capped = limit, true
		if r := []rune(reply); len(r) > limit {
			reply = string(r[:limit])
		}
	}
	return tokens, reply, capped
}

// chunks cuts reply into the deltas a stream sends.
func (s *Server) chunks(reply string) []string {
	r := []rune(reply)
	n := s.opts.Chunks
	if n <= 0 || n > len(r) {
		n = len(r)
	}
	if n == 0 {
		return []string{""}
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, string(r[i*len(r)/n:(i+1)*len(r)/n]))
	}
	return out
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
