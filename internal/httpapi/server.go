package httpapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/kin"
)

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPIDoc }

// Server serves a kin.Service over HTTP.
type Server struct {
	svc     kin.Service
	token   string
	session string // the session cookie's value, derived from token
	log     *slog.Logger
	// KeepAlive is how often an idle event stream sends a keep-alive.
	KeepAlive time.Duration
	// Observe, when set, is told of every request once it is answered:
	// the route's pattern ("GET /v1/agents/{id}", "" when none matched),
	// the status sent and how long it took.
	Observe func(pattern string, status int, d time.Duration)
	// ActAs, when set, answers a request carrying kin.HeaderActAs (value:
	// an agent's id): the context the request is then served with, as
	// that agent, or why not. It runs after the token check.
	ActAs func(ctx context.Context, agent string) (context.Context, error)
	// OpenStream, when set, is asked before a long-lived answer starts
	// (logs, followed events, followed inbox): it counts the stream for the
	// caller and returns its release, or refuses (quota.Streams).
	OpenStream func(ctx context.Context) (release func(), err error)
	// Peer, when set, checks a request another host of the fleet signed
	// (PeerHeader) on a peer route (PeerRoute), in place of the token: the
	// context it is served with, or why not.
	Peer func(r *http.Request) (context.Context, error)
}

// openStream counts a long-lived answer for the caller. A refused one
// closes its connection once answered: a client that keeps it idle would
// otherwise hold the descriptor the limit is there to bound.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	if s.OpenStream == nil {
		return func() {}, nil
	}
	release, err = s.OpenStream(r.Context())
	if err != nil {
		w.Header().Set("Connection", "close")
		return nil, err
	}
	return release, nil
}

// New returns a server for svc. token is the operator token that TCP
// callers must present.
func New(svc kin.Service, token string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{svc: svc, token: token, session: sessionValue(token), log: log, KeepAlive: 15 * time.Second}
}

// Route is one endpoint: a method and a net/http pattern.
type Route struct {
	Method, Pattern string
	handle          func(*Server, http.ResponseWriter, *http.Request) error
}

// Routes lists every endpoint the server registers; the OpenAPI test checks
// each is documented.
func Routes() []Route {
	return []Route{
		{"GET", "/v1/status", (*Server).status},
		{"GET", "/v1/openapi.json", (*Server).openAPI},
		{"POST", "/v1/agents", (*Server).register},
		{"GET", "/v1/agents", (*Server).listAgents},
		{"GET", "/v1/agents/{id}", (*Server).getAgent},
		{"GET", "/v1/agents/{id}/children", (*Server).children},
		{"GET", "/v1/agents/{id}/ancestors", (*Server).ancestors},
		{"GET", "/v1/agents/{id}/tree", (*Server).subtree},
		{"POST", "/v1/agents/{id}/status", (*Server).setStatus},
		{"GET", "/v1/tree", (*Server).forest},
		{"GET", "/v1/events", (*Server).events},
		{"GET", "/v1/governor", (*Server).governor},
		{"POST", "/v1/governor/settings", (*Server).setGovernor},
		{"POST", "/v1/spawn", (*Server).spawn},
		{"POST", "/v1/agents/{id}/stop", (*Server).stop},
		{"GET", "/v1/agents/{id}/logs", (*Server).logs},
		{"GET", "/v1/agents/{id}/resources", (*Server).resources},
		{"POST", "/v1/heartbeat", (*Server).heartbeat},
		{"GET", "/v1/whoami", (*Server).whoami},
		{"POST", "/v1/agents/{id}/wait", (*Server).wait},
		{"GET", "/v1/agents/{id}/result", (*Server).result},
		{"GET", "/v1/agents/{id}/context-pack", (*Server).contextPack},
		{"GET", "/v1/agents/{id}/policy", (*Server).policy},
		{"POST", "/v1/authorize", (*Server).authorize},
		{"GET", "/v1/agents/{id}/explain", (*Server).explain},
		{"POST", "/v1/usage", (*Server).usage},
		{"POST", "/v1/agents/{id}/promote", (*Server).promote},
		{"POST", "/v1/read", (*Server).readFile},
		{"POST", "/v1/messages", (*Server).send},
		{"GET", "/v1/inbox", (*Server).inbox},
		{"GET", "/v1/token", (*Server).agentToken},
		{"POST", "/v1/grants", (*Server).grant},
		{"GET", "/v1/grants", (*Server).grants},
		{"POST", "/v1/grants/delete", (*Server).ungrant},
		{"GET", "/v1/auth-tokens", (*Server).authTokens},
		{"POST", "/v1/keys/rotate", (*Server).rotateKeys},
		{"GET", "/v1/log/checkpoint", (*Server).logCheckpoint},
		{"GET", "/v1/log/checkpoints", (*Server).logCheckpoints},
		{"GET", "/v1/log/proof", (*Server).logProof},
		{"GET", "/v1/log/consistency", (*Server).logConsistency},
		{"GET", "/v1/log/leaves", (*Server).logLeaves},
		{"POST", "/v1/log/verify", (*Server).logVerify},
		{"GET", "/v1/agents/{id}/ancestry-proof", (*Server).ancestryProof},
		{"GET", "/v1/hosts", (*Server).hosts},
	}
}

// Handler returns the API. With requireToken every request must carry
// "Authorization: Bearer <operator token>" (the TCP listener); without it
// the caller is the operator by virtue of reaching the socket.
func (s *Server) Handler(requireToken bool) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range Routes() {
		mux.HandleFunc(rt.Method+" "+rt.Pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := rt.handle(s, w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
	}
	mux.HandleFunc("/", s.NotFound)
	var h http.Handler = s.ActingAs(mux)
	if requireToken {
		h = s.Protect(h)
	}
	return s.logRequests(h)
}

// ActingAs answers a request carrying kin.HeaderActAs as the agent it
// names, through ActAs; without ActAs the header is refused.
func (s *Server) ActingAs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(kin.HeaderActAs)
		if v == "" {
			next.ServeHTTP(w, r)
			return
		}
		if s.ActAs == nil {
			s.writeError(w, r, kin.Errorf(kin.ECodeInvalid, "%s is not served here", kin.HeaderActAs))
			return
		}
		ctx, err := s.ActAs(r.Context(), v)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
// The scheme is case-insensitive (RFC 9110 §11.1), so "bearer" works too.
func bearerToken(auth string) (string, bool) {
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(tok, " "), true
}

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		d := time.Since(start)
		if s.Observe != nil {
			s.Observe(r.Pattern, sw.status(), d)
		}
		s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", sw.status(), "dur", d)
	})
}

// statusWriter remembers the status a handler sent. Unwrap keeps
// http.ResponseController (the event stream's Flush) working through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// NotFound answers a path nothing serves with the API's not_found error,
// naming the request.
func (s *Server) NotFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, kin.Errorf(kin.ECodeNotFound, "no endpoint %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := kin.ErrorCodeOf(err)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	if code == kin.ECodeInternal {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	body := errorBody(err)
	switch {
	case code == kin.ECodeCircuitOpen:
		w.Header().Set("Retry-After", "60")
	case body.RetryAfter > 0:
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(body.RetryAfter)), 10))
	}
	writeJSON(w, StatusOf(code), body)
}

// ErrorBody is every error answer: the code and message of a kin.Error,
// and for permission_escalation every item that exceeds the parent (the
// client SDK turns it back into a *kin.EscalationError).
type ErrorBody struct {
	Code       kin.ErrorCode `json:"code"`
	Message    string        `json:"message"`
	RetryAfter float64       `json:"retry_after,omitempty"`
	Excess     []kin.Excess  `json:"excess,omitempty"`
}

func errorBody(err error) *ErrorBody {
	b := &ErrorBody{Code: kin.ErrorCodeOf(err), Message: kin.ErrorMessageOf(err)}
	var ke *kin.Error
	if errors.As(err, &ke) {
		b.RetryAfter = ke.RetryAfter
	}
	var esc *kin.EscalationError
	if errors.As(err, &esc) {
		b.Excess = esc.Excess
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

func pathID(r *http.Request) (kin.AgentID, error) {
	return kin.ParseAgentID(r.PathValue("id"))
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	st, err := s.svc.Status(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openAPIDoc)
	return err
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) error {
	var req kin.RegisterRequest
	if err := DecodeJSON(r.Body, &req); err != nil {
		return err
	}
	a, err := s.svc.Register(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/agents/"+a.ID.String())
	return writeJSON(w, http.StatusCreated, a)
}

// eachQueryParam calls set for every query parameter, in sorted order so
// that the same query always names the same problem. A parameter not in
// known is refused, naming the known ones; one given more than once is
// refused unless it is repeatable.
func eachQueryParam(q map[string][]string, known []string, repeatable string, set func(key string, vals []string) error) error {
	for _, key := range slices.Sorted(maps.Keys(q)) {
		vals := q[key]
		if len(vals) == 0 || key != repeatable && len(vals) != 1 {
			return kin.Errorf(kin.ECodeInvalid, "query parameter %q is given %d times", key, len(vals))
		}
		if !slices.Contains(known, key) {
			return kin.Errorf(kin.ECodeInvalid, "unknown query parameter %q (known: %s)", key, strings.Join(known, ", "))
		}
		if err := set(key, vals); err != nil {
			return err
		}
	}
	return nil
}

// queryBool reads a query parameter that is true or false.
func queryBool(key, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, kin.Errorf(kin.ECodeInvalid, "%s %q is not true or false", key, v)
	}
	return b, nil
}

// queryCount reads a query parameter that is a whole number, 0 or more;
// what says what it should be ("a whole number of bytes").
func queryCount(key, v, what string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, kin.Errorf(kin.ECodeInvalid, "%s %q is not %s", key, v, what)
	}
	return n, nil
}

// querySeq reads an event or message sequence number (since, Last-Event-ID).
func querySeq(key, v string) (int64, error) { return queryCount(key, v, "a sequence number") }

// ParseAgentFilter reads an agent filter from query parameters.
func ParseAgentFilter(q map[string][]string) (kin.AgentFilter, error) {
	var f kin.AgentFilter
	err := eachQueryParam(q, []string{"status", "state", "role", "parent", "responsible", "name", "limit"}, "", func(key string, vals []string) error {
		v := vals[0]
		switch key {
		case "status":
			f.Status = kin.Status(v)
			if !f.Status.Valid() {
				return kin.Errorf(kin.ECodeInvalid, "status %q is not one of active, suspended, revoked, terminated", v)
			}
		case "state":
			f.State = kin.State(v)
			if !f.State.Valid() {
				return kin.Errorf(kin.ECodeInvalid, "state %q is not a state (%s)", v, kin.StateList())
			}
		case "role":
			f.Role = v
		case "responsible":
			f.Responsible = v
		case "name":
			f.Name = v
		case "parent":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return kin.Errorf(kin.ECodeInvalid, "parent %q is not an agent id (0 for roots)", v)
			}
			f.Parent, f.HasParent = kin.AgentID(n), true
		case "limit":
			n, err := queryCount(key, v, "a whole number")
			if err != nil {
				return err
			}
			f.Limit = int(n)
		}
		return nil
	})
	return f, err
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request) error {
	f, err := ParseAgentFilter(r.URL.Query())
	if err != nil {
		return err
	}
	out, err := s.svc.Agents(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) withID(w http.ResponseWriter, r *http.Request, get func(context.Context, kin.AgentID) (any, error)) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	out, err := get(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) getAgent(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Agent(ctx, id) })
}

func (s *Server) children(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Children(ctx, id) })
}

func (s *Server) ancestors(w http.ResponseWriter, r *http.Request) error {
	return s.withID(w, r, func(ctx context.Context, id kin.AgentID) (any, error) { return s.svc.Ancestors(ctx, id) })
}

func (s *Server) subtree(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if tr, ok := s.svc.(TreeRowser); ok && accepts(r, TreeRowsType) {
		return s.writeTreeRows(w, r, tr, id)
	}
	out, err := s.svc.Tree(r.Context(), id)
	if err != nil {
		return err
	}
	return writeTree(w, r, out)
}

func (s *Server) forest(w http.ResponseWriter, r *http.Request) error {
	if tr, ok := s.svc.(TreeRowser); ok && accepts(r, TreeRowsType) {
		return s.writeTreeRows(w, r, tr, 0)
	}
	out, err := s.svc.Tree(r.Context(), 0)
	if err != nil {
		return err
	}
	return writeTree(w, r, out)
}

// StatusBody is the body of POST /v1/agents/{id}/status.
type StatusBody struct {
	Action  kin.StatusAction `json:"action"`
	Cascade bool             `json:"cascade,omitempty"`
	Reason  string           `json:"reason,omitempty"`
}

func (s *Server) setStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var body StatusBody
	if err := DecodeJSON(r.Body, &body); err != nil {
		return err
	}
	out, err := s.svc.SetStatus(r.Context(), kin.StatusRequest{ID: id, Action: body.Action, Cascade: body.Cascade, Reason: body.Reason})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// ParseEventQuery reads an event filter and the follow flag from query
// parameters.
func ParseEventQuery(q map[string][]string) (f kin.EventFilter, follow bool, err error) {
	err = eachQueryParam(q, []string{"agent", "subject", "since", "before", "type", "limit", "follow"}, "type", func(key string, vals []string) error {
		v := vals[0]
		switch key {
		case "agent":
			if f.Agent, err = kin.ParseAgentID(v); err != nil {
				return err
			}
		case "subject":
			f.Subject, err = queryBool(key, v)
		case "since":
			f.Since, err = querySeq(key, v)
		case "before":
			f.Before, err = querySeq(key, v)
		case "limit":
			var n int64
			n, err = queryCount(key, v, "a whole number")
			f.Limit = int(n)
		case "type":
			f.Types = vals
		case "follow":
			follow, err = queryBool(key, v)
		}
		return err
	})
	if err != nil {
		return f, false, err
	}
	if follow && f.Before != 0 {
		return f, false, kin.Errorf(kin.ECodeInvalid, "before reads history backwards; it cannot be combined with follow=true")
	}
	return f, follow, nil
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	f, follow, err := ParseEventQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if !follow {
		out, err := s.svc.Events(r.Context(), f)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	}
	if err := f.Validate(); err != nil {
		return err
	}
	release, err := s.openStream(w, r)
	if err != nil {
		return err
	}
	defer release()
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	if id := r.Header.Get("Last-Event-ID"); sse && id != "" && f.Since == 0 {
		// An EventSource reconnecting resumes after the last event it saw.
		if f.Since, err = querySeq("Last-Event-ID", id); err != nil {
			return err
		}
	}
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	// Headers go out at once, so a follower of a quiet stream knows it is
	// connected; keep-alives (an SSE comment, an empty NDJSON line) keep
	// proxies from closing it.
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var mu sync.Mutex
	write := func(format string, args ...any) error {
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := write(""); err != nil {
		return nil
	}
	// The keep-alive goroutine must be gone before the handler returns:
	// net/http finishes the response then, and a late write would race it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	defer func() {
		close(stop)
		wg.Wait()
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.KeepAlive)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if sse {
					write(": keep-alive\n\n")
				} else {
					write("\n")
				}
			case <-stop:
				return
			}
		}
	}()
	err = s.svc.FollowEvents(r.Context(), f, func(e kin.Event) error {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if sse {
			return write("id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
		}
		return write("%s\n", b)
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		s.log.Debug("event stream ended", "err", err)
		if sse {
			write("event: error\ndata: %s\n\n", mustJSON(&kin.Error{Code: kin.ErrorCodeOf(err), Message: kin.ErrorMessageOf(err)}))
		}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func (s *Server) governor(w http.ResponseWriter, r *http.Request) error {
	g, err := s.svc.Governor(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g)
}

// GovernorSettingBody is the body of POST /v1/governor/settings.
type GovernorSettingBody struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

func (s *Server) setGovernor(w http.ResponseWriter, r *http.Request) error {
	var body GovernorSettingBody
	if err := DecodeJSON(r.Body, &body); err != nil {
		return err
	}
	g, err := s.svc.SetGovernor(r.Context(), body.Key, body.Value)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, g)
}

// nonNil makes a nil list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
