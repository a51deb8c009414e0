package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/kin"
)

// The environment variables an agent's SDKs read, which kin sets to its
// gateway and the agent's own credential (AgentEnv).
const (
	EnvOpenAIBase    = "OPENAI_BASE_URL"
	EnvOpenAIKey     = "OPENAI_API_KEY"
	EnvAnthropicBase = "ANTHROPIC_BASE_URL"
	EnvAnthropicKey  = "ANTHROPIC_API_KEY"
	// EnvAnthropicToken is Claude Code's bearer-token variable: kin
	// strips it from what a spawner passes (an agent has no other
	// credential than its own) and does not set it.
	EnvAnthropicToken = "ANTHROPIC_AUTH_TOKEN"
	// EnvKey is the agent's credential under kin's own name, set even
	// where no base URL can be (the daemon has no HTTP address): it works
	// on the agent's socket.
	EnvKey = "KIN_MODEL_KEY"
)

// envNames are the variables AgentEnv owns: a spawner's are dropped.
var envNames = []string{EnvOpenAIBase, EnvOpenAIKey, EnvAnthropicBase, EnvAnthropicKey, EnvAnthropicToken, EnvKey}

// Limits on what the gateway reads.
const (
	// MaxRequestBytes bounds a request body (images travel inline).
	MaxRequestBytes = 32 << 20
	// MaxResponseBytes bounds a non-streamed answer the gateway reads
	// whole to meter it.
	MaxResponseBytes = 64 << 20
	// DefaultBodyTimeout bounds how long a request body may take to
	// arrive (Config.BodyTimeout).
	DefaultBodyTimeout = time.Minute
	// maxEventBytes bounds one server-sent event.
	maxEventBytes = 16 << 20
)

// Authority is what the gateway asks of the permission authority.
type Authority interface {
	// ModelGate reads agent id's chain once for the models of one request
	// (authority.Authority.ModelGate).
	ModelGate(id kin.AgentID) (authority.ModelAdmitter, error)
	ModelCall(ctx context.Context, call kin.ModelCallData) (*kin.Spend, error)
}

// Config is what a Gateway is built from.
type Config struct {
	Upstreams []Upstream
	// Key is the secret agents' credentials are HMACs under (the daemon
	// derives it from the log key, so every host of a fleet accepts the
	// same credential for an agent).
	Key []byte
	// Authority admits and meters calls.
	Authority Authority
	// Runs says whether agent id runs on this host now: a credential is
	// honoured only while its agent runs here.
	Runs func(id kin.AgentID) bool
	// AgentUID is the uid agent id's processes run as, when agents run as
	// uids of their own (a root daemon): a call on the HTTP address with
	// its credential must then come from a socket of that uid on this
	// machine. false: agents share the daemon's uid, and the credential
	// alone names the agent there.
	AgentUID func(id kin.AgentID) (uint32, bool)
	// Addr is the daemon's HTTP address ("" when it has none), read at
	// each spawn: the base URL agents' SDKs are given.
	Addr func() string
	// Observe is told of every call metered (metrics); nil: nobody.
	Observe func(kin.ModelCallData)
	// Quota limits each agent's and each subtree's calls and tokens (the
	// profile's quotas.model_requests, quotas.model_tokens); nil: none.
	Quota *quota.Limiter
	// BodyTimeout bounds how long a request's body may take to arrive
	// (0: DefaultBodyTimeout): a body dripped slowly holds a connection
	// before any rate limit can count the call.
	BodyTimeout time.Duration
	// Transport reaches the upstreams (nil: a transport of the gateway's
	// own).
	Transport http.RoundTripper
	Clock     func() time.Time
	Log       *slog.Logger
}

// Gateway is kin's model gateway (issue 25): the OpenAI and Anthropic
// APIs on each agent's socket and on the HTTP address, forwarded to the
// operator's upstreams with the operator's key, each call admitted
// against the agent's budget and model list first and metered from the
// upstream's answer after.
type Gateway struct {
	cfg   Config
	creds credentials
	// upstream reaches the upstreams: its round trip is called itself,
	// not through an http.Client, whose work per request (its copy of the
	// headers for redirects) the gateway never needs: it follows no
	// redirect, and passes one on as it came.
	upstream http.RoundTripper
	log      *slog.Logger
	now      func() time.Time
	keys     []string // the upstreams' keys, for CheckEnv

	mu   sync.Mutex
	held map[kin.AgentID]int64 // tokens held by each agent's calls in flight under a budget (hold)
}

// New makes a Gateway.
func New(cfg Config) (*Gateway, error) {
	if err := Check(cfg.Upstreams); err != nil {
		return nil, err
	}
	if len(cfg.Key) < 16 {
		return nil, errors.New("model gateway: no credential key")
	}
	if cfg.Authority == nil || cfg.Runs == nil {
		return nil, errors.New("model gateway: no authority or runner")
	}
	g := &Gateway{cfg: cfg, creds: newCredentials(cfg.Key), log: cfg.Log, now: cfg.Clock, held: map[kin.AgentID]int64{}}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.cfg.Addr == nil {
		g.cfg.Addr = func() string { return "" }
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Streams in flight each hold a connection: as many are kept
		// idle for the next calls (DefaultTransport's MaxIdleConns, 100
		// over all upstreams, closed and redialled all but 100 of 200
		// concurrent streams' connections).
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = 256
		t.ResponseHeaderTimeout = 10 * time.Minute
		t.Proxy = nil // never through the daemon's proxy settings by surprise
		tr = t
	}
	g.upstream = tr
	for _, u := range cfg.Upstreams {
		if k := u.Key.Reveal(); k != "" {
			g.keys = append(g.keys, k)
		}
	}
	return g, nil
}

// Upstreams are the configured upstreams.
func (g *Gateway) Upstreams() []Upstream { return slices.Clone(g.cfg.Upstreams) }

// Credential is agent id's credential.
func (g *Gateway) Credential(id kin.AgentID) string { return g.creds.For(id) }

// AgentEnv is env (what the spawner asked for) without the variables the
// gateway owns, then those, pointing the agent's SDKs at kin with its own
// credential. The base URLs are the HTTP address's (the agents' SDKs
// speak TCP, not Unix sockets); without one only KIN_MODEL_KEY is set,
// for calls on the agent's socket.
func (g *Gateway) AgentEnv(id kin.AgentID, env []string) []string {
	out := make([]string, 0, len(env)+len(envNames))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(envNames, name) {
			out = append(out, kv)
		}
	}
	cred := g.creds.For(id)
	out = append(out, EnvKey+"="+cred)
	if base := baseURL(g.cfg.Addr()); base != "" {
		out = append(out,
			EnvOpenAIBase+"="+base+"/v1",
			EnvOpenAIKey+"="+cred,
			EnvAnthropicBase+"="+base,
			EnvAnthropicKey+"="+cred,
		)
	}
	return out
}

// CheckEnv refuses a spawn whose requested environment holds an
// upstream's key, in any variable: an agent never gets a provider key.
func (g *Gateway) CheckEnv(env []string) error {
	for _, kv := range env {
		name, v, _ := strings.Cut(kv, "=")
		for _, k := range g.keys {
			if len(k) >= 8 && strings.Contains(v, k) {
				return kin.Errorf(kin.ECodeDenied, "the environment variable %s holds a model upstream's key: agents reach models through kin's gateway with their own credential, never the operator's key", name)
			}
		}
	}
	return nil
}

// endpoint is one API path the gateway serves.
type endpoint struct {
	api     API
	path    string
	metered bool   // counts against budgets
	capKey  string // the request's field bounding output tokens ("" none)
	alt     string // another field that also does (chat's legacy max_tokens)
}

var (
	epChat       = endpoint{api: OpenAI, path: "/v1/chat/completions", metered: true, capKey: "max_completion_tokens", alt: "max_tokens"}
	epResponses  = endpoint{api: OpenAI, path: "/v1/responses", metered: true, capKey: "max_output_tokens"}
	epEmbeddings = endpoint{api: OpenAI, path: "/v1/embeddings", metered: true}
	epModels     = endpoint{api: OpenAI, path: "/v1/models"}
	epAModels    = endpoint{api: Anthropic, path: "/v1/models"}
	epMessages   = endpoint{api: Anthropic, path: "/v1/messages", metered: true, capKey: "max_tokens"}
	epCount      = endpoint{api: Anthropic, path: "/v1/messages/count_tokens"}
)

// route is the endpoint r calls, or false when it is not the gateway's.
// POST /v1/messages is also kin's own API (kin send): a request with
// Anthropic's headers (anthropic-version, which its SDKs always send, or
// x-api-key) or a gateway credential is the model's, any other kin's.
func route(r *http.Request) (endpoint, bool) {
	anthropicHeaders := r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != ""
	switch r.URL.Path {
	case epChat.path:
		return epChat, true
	case epResponses.path:
		return epResponses, true
	case epEmbeddings.path:
		return epEmbeddings, true
	case epModels.path:
		if anthropicHeaders {
			return epAModels, true
		}
		return epModels, true
	case epCount.path:
		return epCount, true
	case epMessages.path:
		if anthropicHeaders || strings.HasPrefix(bearer(r), credPrefix) {
			return epMessages, true
		}
	}
	return endpoint{}, false
}

// Socket serves the gateway on agents' sockets in front of next (kin's
// API there): the connection's agent (in the request's caller) must be
// the one its credential names.
func (g *Gateway) Socket(next http.Handler) http.Handler { return g.in(next, true) }

// TCP serves the gateway on the HTTP address in front of next: the
// credential alone names the agent (see docs/ARCHITECTURE.md, "The model
// gateway", for what that binds and what it does not).
func (g *Gateway) TCP(next http.Handler) http.Handler { return g.in(next, false) }

// in serves the gateway's routes and hands every other request to next.
func (g *Gateway) in(next http.Handler, socket bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := route(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		g.serve(w, r, ep, socket)
	})
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// credentialOf is the credential r carries: OpenAI's bearer token, or
// Anthropic's x-api-key (or its bearer token, as Claude Code sends
// ANTHROPIC_AUTH_TOKEN).
func credentialOf(r *http.Request, api API) string {
	if api == Anthropic {
		if k := r.Header.Get("x-api-key"); k != "" {
			return k
		}
	}
	return bearer(r)
}

// authenticate is the agent r acts as, or an error in words the agent's
// SDK shows.
func (g *Gateway) authenticate(r *http.Request, ep endpoint, onSocket bool) (kin.AgentID, *apiError) {
	tok := credentialOf(r, ep.api)
	if tok == "" {
		return 0, &apiError{status: http.StatusUnauthorized, code: kin.ECodeUnauthorized,
			msg: "no credential: kin's model gateway takes the agent's own key, which kin puts in its environment (" + EnvOpenAIKey + ", " + EnvAnthropicKey + ", " + EnvKey + ")"}
	}
	id := g.creds.Check(tok)
	if id == 0 {
		return 0, &apiError{status: http.StatusUnauthorized, code: kin.ECodeUnauthorized, msg: "the credential is not one kin gave an agent"}
	}
	if onSocket {
		c := caller.Of(r.Context())
		if err := c.Forbidden(); err != nil {
			return 0, &apiError{status: http.StatusForbidden, code: kin.ECodeForbidden, msg: kin.ErrorMessageOf(err)}
		}
		if c.Agent != id {
			return 0, &apiError{status: http.StatusForbidden, code: kin.ECodeForbidden,
				msg: fmt.Sprintf("the credential is agent %d's, and this is agent %d's socket: an agent calls with its own", id, c.Agent)}
		}
	}
	if !onSocket && g.cfg.AgentUID != nil {
		if want, ok := g.cfg.AgentUID(id); ok {
			got, err := peerUID(r)
			switch {
			case errors.Is(err, errNotLocal):
				return 0, &apiError{status: http.StatusForbidden, code: kin.ECodeForbidden,
					msg: fmt.Sprintf("the credential is agent %d's, and agent %d runs on this machine: its calls come from here, this one does not", id, id)}
			case err != nil:
				g.log.Error("model gateway: the connection's peer", "agent", id, "err", err)
				return 0, &apiError{status: http.StatusForbidden, code: kin.ECodeForbidden, msg: "kin could not tell which user the connection comes from"}
			case got != want:
				return 0, &apiError{status: http.StatusForbidden, code: kin.ECodeForbidden,
					msg: fmt.Sprintf("the credential is agent %d's, and the connection comes from uid %d, not the agent's (%d): an agent calls with its own", id, got, want)}
			}
		}
	}
	if !g.cfg.Runs(id) {
		// An agent stopped because its subtree spent its budget is told
		// so (the refusal it would have seen a moment earlier), not that
		// its credential lapsed.
		if gate, err := g.cfg.Authority.ModelGate(id); err == nil && gate.Exhausted() != nil {
			return 0, apiErrorOf(gate.Exhausted())
		}
		return 0, &apiError{status: http.StatusUnauthorized, code: kin.ECodeUnauthorized,
			msg: fmt.Sprintf("the credential is agent %d's, which does not run on this host (an ended agent's credential is revoked)", id)}
	}
	return id, nil
}

// pick is the upstream that serves model on api: a model "NAME/rest"
// where NAME is an upstream of that API goes to it as "rest"; any other
// to the first upstream of the API configured.
func (g *Gateway) pick(api API, model string) (Upstream, string, bool) {
	if name, rest, ok := strings.Cut(model, "/"); ok && rest != "" {
		for _, u := range g.cfg.Upstreams {
			if u.API == api && u.Name == name {
				return u, rest, true
			}
		}
	}
	for _, u := range g.cfg.Upstreams {
		if u.API == api {
			return u, model, true
		}
	}
	return Upstream{}, "", false
}

// call is one request through the gateway, as it is metered.
type call struct {
	data     kin.ModelCallData
	began    time.Time
	limit    *authority.ModelLimit
	metered  bool
	counted  bool // an endpoint that counts against budgets (not count_tokens)
	wantUsag bool // the client asked for the usage chunk itself
	// beforeMeter, set while a stream is passed on, sends what the
	// stream has written so far before the metering's commit.
	beforeMeter func()
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, ep endpoint, onSocket bool) {
	began := g.now()
	id, aerr := g.authenticate(r, ep, onSocket)
	if aerr != nil {
		aerr.write(w, ep.api)
		return
	}
	if r.Method == http.MethodGet && ep.path == "/v1/models" {
		g.models(w, r, ep, id)
		return
	}
	if r.Method != http.MethodPost {
		(&apiError{status: http.StatusMethodNotAllowed, code: kin.ECodeInvalid, msg: r.Method + " " + ep.path + " is not served: use POST"}).write(w, ep.api)
		return
	}
	bodyTimeout := g.cfg.BodyTimeout
	if bodyTimeout <= 0 {
		bodyTimeout = DefaultBodyTimeout
	}
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(g.now().Add(bodyTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if deadlineSet && err == nil {
		rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The deadline stays: the rest of the body is not waited for.
			w.Header().Set("Connection", "close")
			(&apiError{status: http.StatusRequestTimeout, code: kin.ECodeInvalid, msg: fmt.Sprintf("the request body did not arrive within %v", bodyTimeout)}).write(w, ep.api)
			return
		}
		if errors.As(err, &tooBig) {
			(&apiError{status: http.StatusRequestEntityTooLarge, code: kin.ECodeInvalid, msg: fmt.Sprintf("the request body is larger than %d bytes", MaxRequestBytes)}).write(w, ep.api)
			return
		}
		(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: "reading the request body: " + err.Error()}).write(w, ep.api)
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: "the request body is not a JSON object"}).write(w, ep.api)
		return
	}
	var model string
	if raw, ok := req["model"]; !ok || json.Unmarshal(raw, &model) != nil || model == "" {
		(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: "the request names no model (\"model\": a string)"}).write(w, ep.api)
		return
	}
	if why := badModelName(model); why != "" {
		(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: fmt.Sprintf("the model name %q %s", model, why)}).write(w, ep.api)
		return
	}
	up, upModel, ok := g.pick(ep.api, model)
	if !ok {
		(&apiError{status: http.StatusNotFound, code: kin.ECodeNotFound, msg: fmt.Sprintf("kin serve has no %s upstream (--model-upstream, --model-api)", ep.api)}).write(w, ep.api)
		return
	}
	// One read of the agent's chain for both names.
	var lim *authority.ModelLimit
	gate, err := g.cfg.Authority.ModelGate(id)
	if err == nil {
		lim, err = gate.Admit(model)
	}
	if err == nil && upModel != model {
		// "NAME/model" reaches upstream NAME as "model": the policy
		// must allow it under both names (a deny list naming the model
		// is not passed by naming its upstream too).
		var as *authority.ModelLimit
		if as, err = gate.Admit(upModel); err != nil {
			err = kin.Errorf(kin.ErrorCodeOf(err), "%s (the upstream %s gets model %q)", kin.ErrorMessageOf(err), up.Name, upModel)
		} else if !lim.Priced && as != nil && as.Priced {
			// Priced as the model the upstream bills.
			lim.Price, lim.Priced = as.Price, true
		}
	}
	if err == nil && ep.metered {
		if err = g.cfg.Quota.AllowAgent(id, quota.ModelRequests); err == nil {
			err = g.cfg.Quota.AllowAgent(id, quota.ModelTokens)
		}
	}
	if err != nil {
		apiErrorOf(err).write(w, ep.api)
		return
	}
	c := &call{began: began, limit: lim, counted: ep.metered, data: kin.ModelCallData{Agent: id, API: string(ep.api), Path: ep.path, Upstream: up.Name, Model: model}}
	// changed: the body kin forwards differs from the one it got (else
	// the agent's bytes go on as they came, when the upstream cannot read
	// other members in them than kin did: uniqueMembers).
	renamed := upModel != model
	changed := renamed
	if changed {
		req["model"], _ = json.Marshal(upModel)
	}
	f, why := requestFields(req, ep)
	if why != "" {
		(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: why}).write(w, ep.api)
		return
	}
	c.data.Stream = f.stream
	other := false // kin changed the request otherwise than renaming its model
	if ep.metered {
		release, capped, aerr := g.hold(id, req, ep, lim, len(body), f.choices)
		if aerr != nil {
			aerr.write(w, ep.api)
			return
		}
		defer release()
		other = capped
		if f.stream && ep == epChat {
			var set bool
			c.wantUsag, set = setIncludeUsage(req)
			other = other || set
		}
		changed = changed || other
	}
	unique := uniqueMembers(body, len(req))
	if unique && renamed && !other {
		// Only the model renamed: written into the agent's bytes, the
		// rest of the body (a conversation, large) not encoded again.
		var ok bool
		if body, ok = spliceMembers(body, req, "model"); !ok {
			unique = false
		}
	} else if changed {
		unique = false // encoded as kin read it
	}
	if !unique {
		if body, err = json.Marshal(req); err != nil {
			(&apiError{status: http.StatusBadRequest, code: kin.ECodeInvalid, msg: "the request body: " + err.Error()}).write(w, ep.api)
			return
		}
	}
	g.forward(w, r, ep, up, body, c)
}

// spliceMembers is body, a JSON object with unique top-level members
// (uniqueMembers) that json.Unmarshal read into req, with the members
// named (those kin changed) as req now holds them: each replaced where it
// is, or added at the end. Every other byte stays as the agent sent it.
// False (body unchanged) when a top-level name holds an escape or a
// member named was removed: the caller encodes req instead.
func spliceMembers(body []byte, req map[string]json.RawMessage, names ...string) ([]byte, bool) {
	type span struct{ from, to int }
	var spans map[string]span
	end := -1 // the closing brace
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return body, false
	}
	for i = skipSpace(body, i+1); i < len(body); {
		if body[i] == '}' {
			end = i
			break
		}
		if body[i] != '"' {
			return body, false
		}
		j := i + 1
		for j < len(body) && body[j] != '"' {
			if body[j] == '\\' {
				return body, false // the name as the upstream reads it is not its bytes
			}
			j++
		}
		name := string(body[i+1 : min(j, len(body))])
		i = skipSpace(body, j+1)
		if i >= len(body) || body[i] != ':' {
			return body, false
		}
		from := skipSpace(body, i+1)
		to := skipValue(body, from)
		if to < 0 {
			return body, false
		}
		if spans == nil {
			spans = map[string]span{}
		}
		spans[name] = span{from, to}
		i = skipSpace(body, to)
		if i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	if end < 0 {
		return body, false
	}
	type edit struct {
		at   span
		name string
	}
	var edits []edit
	var added []string
	for _, k := range names {
		if slices.ContainsFunc(edits, func(e edit) bool { return e.name == k }) || slices.Contains(added, k) {
			continue
		}
		v, set := req[k]
		at, was := spans[k]
		switch {
		case set && was && !bytes.Equal(body[at.from:at.to], v):
			edits = append(edits, edit{at, k})
		case set && !was:
			added = append(added, k)
		case !set && was:
			return body, false
		}
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.at.from - b.at.from })
	out := make([]byte, 0, len(body)+64)
	last := 0
	for _, e := range edits {
		out = append(out, body[last:e.at.from]...)
		out = append(out, req[e.name]...)
		last = e.at.to
	}
	out = append(out, body[last:end]...)
	for _, k := range added {
		if len(spans) > 0 || k != added[0] {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, k)
		out = append(out, ':')
		out = append(out, req[k]...)
	}
	return append(out, body[end:]...), true
}

// skipSpace is the index of the first byte of b from i that is not JSON
// white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue is the index just past the JSON value that starts at b[i]
// (b valid JSON), or -1.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return -1
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // a literal or number just before it
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

// uniqueMembers reports whether body, a JSON object json.Unmarshal took
// into n members, holds exactly n at its top level, each named in valid
// UTF-8: then any upstream reads the members kin read, whatever its JSON
// parser does with a name given twice (the first or the last) or with
// bytes that are not UTF-8, and the body may go on as it came. Else kin
// forwards its own encoding of what it read.
func uniqueMembers(body []byte, n int) bool {
	depth, count := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			j := i + 1
			for ; j < len(body) && body[j] != '"'; j++ {
				if body[j] == '\\' {
					j++
				}
			}
			if j >= len(body) {
				return false
			}
			if depth == 1 {
				k := j + 1
				for k < len(body) && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r') {
					k++
				}
				if k < len(body) && body[k] == ':' {
					count++
					if !utf8.Valid(body[i+1 : j]) {
						return false
					}
				}
			}
			i = j
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
	}
	return count == n
}

// fields are what a request's fields say of how it is metered.
type fields struct {
	stream  bool
	choices int64 // a chat call's n: its choices share its output bound
}

// requestFields reads the fields of a request that decide how it is
// metered, and says what is wrong with them ("" when nothing): an
// upstream lenient with types (many OpenAI-compatible servers read "true"
// as true) would otherwise stream or fan out a call kin took for another,
// and a background response answers before its usage exists.
func requestFields(req map[string]json.RawMessage, ep endpoint) (fields, string) {
	f := fields{choices: 1}
	if raw, ok := req["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &f.stream) != nil {
			return f, `"stream" must be true or false`
		}
	}
	if raw, ok := req["stream_options"]; ok && string(raw) != "null" {
		var o map[string]json.RawMessage
		if json.Unmarshal(raw, &o) != nil || o == nil {
			return f, `"stream_options" must be an object`
		}
	}
	if raw, ok := req["n"]; ok && string(raw) != "null" {
		var n int64
		if json.Unmarshal(raw, &n) != nil || n < 1 || n > 128 {
			return f, `"n" must be a whole number from 1 to 128`
		}
		if ep == epChat {
			f.choices = n
		}
	}
	if ep == epResponses {
		if raw, ok := req["background"]; ok && string(raw) != "null" && string(raw) != "false" {
			return f, `kin's gateway does not serve background responses ("background": true): it meters a response from its answer, and a background one answers before it is made`
		}
	}
	return f, ""
}

// badModelName says what is wrong with a model name, "" when nothing:
// kin's policy compares names as they are written, so a name the
// upstream might read otherwise (with spaces or control characters
// around or in it) is refused rather than forwarded.
func badModelName(model string) string {
	if len(model) > 256 {
		return "is longer than 256 bytes"
	}
	if !utf8.ValidString(model) {
		return "is not UTF-8"
	}
	for _, r := range model {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return "holds a space or a control character"
		}
	}
	return ""
}

// tokensLeft is the least number of tokens the agent's chain has left:
// its tokens, and its cost at the model's output price (nil: no budget
// binds it).
func tokensLeft(lim *authority.ModelLimit) *int64 {
	if lim == nil {
		return nil
	}
	var left *int64
	if lim.Tokens != nil {
		t := max(*lim.Tokens, 1)
		left = &t
	}
	if lim.Cost != nil && lim.Priced && lim.Price.Output > 0 {
		t := max(int64(*lim.Cost/lim.Price.Output*1e6), 1)
		if left == nil || t < *left {
			left = &t
		}
	}
	return left
}

// hold admits a metered call against what the agent's calls in flight
// may still spend, and caps its output: each call in flight under a
// budget holds its output bound and an estimate of its input (a quarter
// of its body's bytes) until it is metered, and a call finding that its
// agent's calls in flight hold all its chain has left is refused (429
// rate_limited, retry in a second), so that one agent starting many calls
// together spends at most about one call past its budget, as calls one
// after another do. release gives the hold back.
// capped says whether the request's output bound was set or lowered.
func (g *Gateway) hold(id kin.AgentID, req map[string]json.RawMessage, ep endpoint, lim *authority.ModelLimit, bodyBytes int, choices int64) (release func(), capped bool, aerr *apiError) {
	left := tokensLeft(lim)
	if left == nil {
		return func() {}, false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	held := g.held[id]
	avail := *left - held
	if avail <= 0 {
		return nil, false, &apiError{status: http.StatusTooManyRequests, code: kin.ECodeRateLimited, retryAfter: 1,
			msg: fmt.Sprintf("agent %d's calls in flight may spend the %d tokens its budget has left: this call may be made when they end", id, *left)}
	}
	bound, capped := capOutput(req, ep, avail, choices)
	n := bound + int64(bodyBytes/4)
	g.held[id] = held + n
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.held[id] -= n; g.held[id] <= 0 {
			delete(g.held, id)
		}
	}, capped, nil
}

// capOutput bounds the request's output tokens by left, what the agent's
// subtree has left, shared by its choices (requestFields), and returns the
// bound the call goes with, all its choices together (0 for an endpoint
// without one), and whether it changed the request.
func capOutput(req map[string]json.RawMessage, ep endpoint, left, choices int64) (int64, bool) {
	if ep.capKey == "" {
		return 0, false
	}
	if ep == epResponses {
		// OpenAI refuses a max_output_tokens below 16: the call may then
		// go past what was left by at most that much.
		left = max(left, 16)
	}
	// A chat call's output bound is per choice: n choices share what is
	// left.
	if ep != epChat || choices < 1 {
		choices = 1
	}
	left = max(left/choices, 1)
	changed := false
	set, bound := false, int64(0)
	for _, k := range []string{ep.capKey, ep.alt} {
		if k == "" {
			continue
		}
		raw, ok := req[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int64
		if json.Unmarshal(raw, &n) == nil && n > 0 && n <= left {
			set = true // the client's own bound is within what is left
			if bound == 0 || n < bound {
				bound = n
			}
			continue
		}
		req[k], _ = json.Marshal(left)
		set, bound, changed = true, left, true
	}
	if !set {
		req[ep.capKey], _ = json.Marshal(left)
		bound, changed = left, true
	}
	return bound * choices, changed
}

// setIncludeUsage asks an OpenAI chat stream for its usage chunk
// (stream_options.include_usage), and says whether the client had asked
// for it itself (else the gateway drops the chunk from what it passes on)
// and whether it changed the request (not when the client's options were
// already so, each named once).
func setIncludeUsage(req map[string]json.RawMessage) (asked, changed bool) {
	opts := map[string]json.RawMessage{}
	raw, ok := req["stream_options"]
	if ok && string(raw) != "null" {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			opts = map[string]json.RawMessage{}
		}
	}
	if v, ok := opts["include_usage"]; ok {
		json.Unmarshal(v, &asked)
	}
	if asked && string(opts["include_usage"]) == "true" && uniqueMembers(raw, len(opts)) {
		return true, false
	}
	opts["include_usage"] = json.RawMessage("true")
	req["stream_options"], _ = json.Marshal(opts)
	return asked, true
}

// hopHeaders and the credentials are never passed on, either way.
var dropRequestHeaders = []string{
	"Authorization", "X-Api-Key", "Cookie", "Proxy-Authorization", "Openai-Organization", "Openai-Project",
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Content-Length", "Accept-Encoding", "Host", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
}

var dropResponseHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
	"Content-Length", "Set-Cookie",
	// The operator's account at the provider is none of the agent's.
	"Openai-Organization", "Openai-Project", "Anthropic-Organization-Id",
}

// dropRequest and dropResponse are those lists by canonical name.
var dropRequest, dropResponse = headerSet(dropRequestHeaders), headerSet(dropResponseHeaders)

func headerSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[http.CanonicalHeaderKey(n)] = true
	}
	return m
}

// connectionHeaders are the headers a message's Connection header names:
// hop-by-hop, never passed on (by canonical name; nil when none).
func connectionHeaders(h http.Header) map[string]bool {
	var out map[string]bool
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if out == nil {
					out = map[string]bool{}
				}
				out[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return out
}

// dropHeader says whether header k is one of drop's or hop's, whatever
// its case.
func dropHeader(k string, drop, hop map[string]bool) bool {
	c := http.CanonicalHeaderKey(k) // k itself when canonical already: no copy
	return drop[c] || hop[c]
}

func (g *Gateway) upstreamRequest(ctx context.Context, r *http.Request, up Upstream, path string, body []byte) (*http.Request, error) {
	u := *up.URL
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = r.URL.RawQuery
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	hop := connectionHeaders(r.Header)
	for k, vs := range r.Header {
		if dropHeader(k, dropRequest, hop) || len(k) >= 4 && strings.EqualFold(k[:4], "kin-") {
			continue
		}
		out.Header[k] = slices.Clone(vs)
	}
	if k := up.Key.Reveal(); k != "" {
		switch up.API {
		case OpenAI:
			out.Header.Set("Authorization", "Bearer "+k)
		case Anthropic:
			out.Header.Set("X-Api-Key", k)
		}
	}
	if up.API == Anthropic && out.Header.Get("Anthropic-Version") == "" {
		out.Header.Set("Anthropic-Version", "2023-06-01")
	}
	return out, nil
}

func copyResponseHeaders(w http.ResponseWriter, resp *http.Response) {
	hop := connectionHeaders(resp.Header)
	for k, vs := range resp.Header {
		if dropHeader(k, dropResponse, hop) {
			continue
		}
		w.Header()[k] = slices.Clone(vs)
	}
}

// DrainLimit is how long the gateway goes on reading an upstream's
// answer after the agent hung up: the usage comes last (a chat stream's
// final chunk, message_delta), and an agent that takes the content and
// leaves before it is metered all the same.
const DrainLimit = 5 * time.Minute

// upstreamContext is the context of a call to the upstream: not ended by
// the agent's leaving (client) but DrainLimit after it, and by cancel.
func upstreamContext(client context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(client))
	stop := context.AfterFunc(client, func() {
		t := time.NewTimer(DrainLimit)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() { stop(); cancel() }
}

func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, ep endpoint, up Upstream, body []byte, c *call) {
	ctx, cancel := upstreamContext(r.Context())
	defer cancel()
	out, err := g.upstreamRequest(ctx, r, up, ep.path, body)
	if err != nil {
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: "the upstream request: " + err.Error()}).write(w, ep.api)
		return
	}
	resp, err := g.send(out)
	if err != nil {
		c.data.Error = upstreamError(err, up)
		g.meter(r.Context(), c, usage{})
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: c.data.Error}).write(w, ep.api)
		return
	}
	defer resp.Body.Close()
	c.data.Status = resp.StatusCode
	if resp.StatusCode/100 == 2 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		g.stream(w, r, ep, resp, c)
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err == nil && len(b) > MaxResponseBytes {
		err = fmt.Errorf("the answer is larger than %d bytes", MaxResponseBytes)
	}
	if err != nil {
		c.data.Error = "reading the upstream's answer: " + err.Error()
		g.meter(r.Context(), c, usage{})
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: c.data.Error}).write(w, ep.api)
		return
	}
	if resp.StatusCode == http.StatusUnauthorized {
		// The upstream refused the operator's key: its answer may quote
		// the key (providers echo a masked one), so neither the agent nor
		// the log gets it; the agent can do nothing about it anyway.
		g.log.Warn("model gateway: the upstream refused kin's key for it (HTTP 401): check kin serve --model-key", "upstream", up.Name)
		c.data.Error = "the upstream refused the operator's key"
		g.meter(r.Context(), c, usage{})
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, noRetry: true,
			msg: fmt.Sprintf("the upstream %s refused the key kin holds for it (HTTP 401): the operator must fix kin serve --model-key %s", up.Name, up.Name)}).write(w, ep.api)
		return
	}
	var u usage
	if resp.StatusCode/100 == 2 {
		u = usageOfBody(ep.api, b)
	}
	// Metered before the answer goes out: the agent's next call sees
	// this one's spend.
	g.meter(r.Context(), c, u)
	copyResponseHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}

// send makes one request to an upstream.
func (g *Gateway) send(out *http.Request) (*http.Response, error) {
	resp, err := g.upstream.RoundTrip(out)
	if err == nil && resp == nil {
		return nil, errors.New("the transport gave no answer")
	}
	return resp, err
}

// upstreamError describes a failed call to an upstream without its key
// (the URL holds none).
func upstreamError(err error, up Upstream) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("the upstream %s (%s) did not answer: %v", up.Name, up.URL.Redacted(), err)
}

// meter records the call: its tokens and cost against the agent's
// budgets and a model.call event (Authority.ModelCall), once.
func (g *Gateway) meter(ctx context.Context, c *call, u usage) {
	if c.metered || !c.counted {
		return
	}
	c.metered = true
	if c.beforeMeter != nil {
		c.beforeMeter()
	}
	c.data.InputTokens, c.data.OutputTokens, c.data.CachedTokens = u.input, u.output, u.cached
	c.data.Tokens = u.input + u.output
	if c.limit != nil && c.limit.Priced {
		c.data.Cost = c.limit.Price.Cost(u.input, u.cached, u.output)
	}
	c.data.LatencyMS = float64(g.now().Sub(c.began).Microseconds()) / 1000
	// The token quota took one token to admit the call: the rest now.
	g.cfg.Quota.Charge(c.data.Agent, quota.ModelTokens, int(min(c.data.Tokens, math.MaxInt32))-1)
	// Recorded even when the client went away: the upstream charged.
	if _, err := g.cfg.Authority.ModelCall(context.WithoutCancel(ctx), c.data); err != nil {
		g.log.Error("model gateway: recording a call failed", "agent", c.data.Agent, "model", c.data.Model, "tokens", c.data.Tokens, "err", err)
	}
	if g.cfg.Observe != nil {
		g.cfg.Observe(c.data)
	}
}

// models answers GET /v1/models: the upstream's list, without the models
// the agent's policy does not allow.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request, ep endpoint, id kin.AgentID) {
	up, _, ok := g.pick(ep.api, "")
	if !ok {
		(&apiError{status: http.StatusNotFound, code: kin.ECodeNotFound, msg: fmt.Sprintf("kin serve has no %s upstream (--model-upstream, --model-api)", ep.api)}).write(w, ep.api)
		return
	}
	out, err := g.upstreamRequest(r.Context(), r, up, ep.path, nil)
	if err != nil {
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: "the upstream request: " + err.Error()}).write(w, ep.api)
		return
	}
	resp, err := g.send(out)
	if err != nil {
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: upstreamError(err, up)}).write(w, ep.api)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	if err != nil {
		(&apiError{status: http.StatusBadGateway, code: kin.ECodeUnavailable, msg: "reading the upstream's answer: " + err.Error()}).write(w, ep.api)
		return
	}
	if resp.StatusCode == http.StatusOK {
		var list map[string]json.RawMessage
		var data []map[string]json.RawMessage
		gate, err := g.cfg.Authority.ModelGate(id)
		if err == nil && json.Unmarshal(b, &list) == nil && json.Unmarshal(list["data"], &data) == nil {
			// One read of the agent's chain for the whole list.
			kept := data[:0]
			for _, m := range data {
				var name string
				json.Unmarshal(m["id"], &name)
				if _, err := gate.Admit(name); kin.ErrorCodeOf(err) != kin.ECodeDenied {
					kept = append(kept, m)
				}
			}
			if len(kept) < len(data) { // else the answer goes on as it came
				list["data"], _ = json.Marshal(kept)
				if nb, err := json.Marshal(list); err == nil {
					b = nb
				}
			}
		}
	}
	copyResponseHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}
