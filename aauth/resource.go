package aauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

// DefaultResourceTokenLifetime is a resource token's lifetime unless
// configured.
const DefaultResourceTokenLifetime = 5 * time.Minute

// Log attribute keys.
const (
	logKeyCode       = "code"
	logKeyDetail     = "detail"
	logKeyError      = "error"
	logKeyRetryAfter = "retry_after"
)

// ResourceConfig configures a Resource.
type ResourceConfig struct {
	// Issuer is this resource's URL: the iss of its resource tokens and the
	// aud of the auth tokens it accepts.
	Issuer string
	// Key signs resource tokens; KID names it in the JWKS (empty: the key's
	// RFC 7638 thumbprint).
	Key ed25519.PrivateKey
	KID string
	// PersonServer is the trusted person server (kin's issuer URL): the aud
	// of resource tokens and the only iss of auth tokens accepted.
	PersonServer string
	// AgentProviders are the accepted agent-token issuers; nil means
	// {PersonServer}.
	AgentProviders []string
	// Scope returns the space-separated scopes a request needs; nil means
	// none.
	Scope func(*http.Request) string
	// CheckRevocation asks the person server's token_status_endpoint about
	// every auth token (no caching); a person server without one, or one
	// that cannot be reached, fails the request with 503.
	CheckRevocation bool
	// ResourceTokenLifetime is 5 minutes when zero; at most 1 hour.
	ResourceTokenLifetime time.Duration
	// Discovery resolves token issuers' keys; nil is a new one with a 5 s
	// timeout client.
	Discovery *Discovery
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger gets the details of refused requests (never sent to the peer);
	// nil discards them.
	Logger *slog.Logger
	// ReplayCapacity bounds the signatures the Resource remembers so as to
	// accept each once (in memory, for the 60 s window); 0 is 1,000,000.
	// Past it, new signed requests are answered 503 until the oldest leave
	// the window.
	ReplayCapacity int
}

// Resource is the resource side of AAuth: Middleware guards handlers,
// MetadataHandler publishes the resource's metadata and keys.
type Resource struct {
	cfg        ResourceConfig
	key        identity.Key
	jwk        identity.JWK
	issuerPath string
	providers  []string
	disc       *Discovery
	client     *http.Client
	log        *slog.Logger
	replays    *httpsig.Replays
}

// NewResource checks cfg and returns a Resource.
func NewResource(cfg ResourceConfig) (*Resource, error) {
	iu, err := issuerURL(cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("aauth: ResourceConfig.Issuer: %v", err)
	}
	if _, err := issuerURL(cfg.PersonServer); err != nil {
		return nil, fmt.Errorf("aauth: ResourceConfig.PersonServer: %v", err)
	}
	if len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("aauth: ResourceConfig.Key: not an Ed25519 private key")
	}
	if cfg.ReplayCapacity < 0 {
		return nil, fmt.Errorf("aauth: ResourceConfig.ReplayCapacity: %d is negative", cfg.ReplayCapacity)
	}
	if cfg.ResourceTokenLifetime < 0 || cfg.ResourceTokenLifetime > identity.MaxResourceLifetime {
		return nil, fmt.Errorf("aauth: ResourceConfig.ResourceTokenLifetime: %v is not within (0, %v]", cfg.ResourceTokenLifetime, identity.MaxResourceLifetime)
	}
	if cfg.ResourceTokenLifetime < time.Second {
		cfg.ResourceTokenLifetime = DefaultResourceTokenLifetime
	}
	providers := slices.Clone(cfg.AgentProviders)
	if providers == nil {
		providers = []string{cfg.PersonServer}
	}
	for _, p := range providers {
		if _, err := issuerURL(p); err != nil {
			return nil, fmt.Errorf("aauth: ResourceConfig.AgentProviders: %v", err)
		}
	}
	pub := cfg.Key.Public().(ed25519.PublicKey)
	kid := cfg.KID
	if kid == "" {
		kid = identity.Thumbprint(identity.PublicJWK(pub, ""))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	disc := cfg.Discovery
	if disc == nil {
		disc = &Discovery{Now: cfg.Now}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client := disc.Client
	if client == nil {
		client = disc.httpClient()
	}
	return &Resource{
		cfg:        cfg,
		key:        identity.Key{KID: kid, Private: cfg.Key},
		jwk:        identity.PublicJWK(pub, kid),
		issuerPath: strings.TrimSuffix(iu.EscapedPath(), "/"),
		providers:  providers,
		disc:       disc,
		client:     client,
		log:        log,
		replays:    httpsig.NewReplays(cfg.Now(), cfg.ReplayCapacity),
	}, nil
}

type authContextKey struct{}

// AuthFromContext returns the auth token claims Middleware verified for the
// request.
func AuthFromContext(ctx context.Context) (*AuthClaims, bool) {
	c, ok := ctx.Value(authContextKey{}).(*AuthClaims)
	return c, ok
}

// verification is what the resolve callback learned about one request.
type verification struct {
	agent *AgentClaims
	auth  *AuthClaims
	// keyErr is the last failed key lookup; unavailable is set when it was
	// the network's or the issuer's server's fault.
	keyErr      error
	unavailable error
}

// Middleware lets through requests signed with an acceptable auth token
// (the claims are in the context: AuthFromContext) and answers every other
// one: an unsigned request with 401 requirement=agent-token, a request signed
// with a valid agent token with 401 requirement=auth-token and a resource
// token bound to the agent's key, a refused signature or token with 401 and
// Signature-Error (replayed_request for a signature it already accepted:
// each is accepted once), missing scope with 403, and with 503 when it has
// no room left to remember another signature.
func (r *Resource) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !signed(req) {
			r.challenge(w, RequirementAgentToken, nil, &Problem{Status: http.StatusUnauthorized, Code: CodeAgentTokenRequired, Detail: "sign the request with an agent token"})
			return
		}
		now := r.cfg.Now()
		var v verification
		verified, err := r.replays.Verify(req, now, r.resolve(req.Context(), now, &v))
		if v.unavailable != nil {
			r.log.Warn("aauth: token issuer unavailable", logKeyError, v.unavailable.Error())
			WriteProblem(w, &Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Detail: "a token issuer's keys could not be fetched"})
			return
		}
		var full *httpsig.FullError
		if errors.As(err, &full) {
			r.log.Warn("aauth: request refused: the replay cache is full", logKeyRetryAfter, full.RetryAfter.String())
			WriteUnavailable(w, "too many signed requests in the last minute to remember another; retry later", full.RetryAfter)
			return
		}
		if err != nil {
			r.refuse(w, err)
			return
		}
		if v.agent != nil {
			r.challengeAuth(w, req, v.agent)
			return
		}
		c := v.auth
		// resolve returned cnf.jwk, so this holds by construction; it is
		// the binding the draft asks for, kept explicit.
		if identity.Thumbprint(identity.PublicJWK(verified.PublicKey, "")) != identity.Thumbprint(c.Cnf.JWK) {
			r.refuse(w, &SignatureError{Code: httpsig.CodeInvalidSignature, Detail: "signing key is not the auth token's cnf.jwk"})
			return
		}
		if r.cfg.CheckRevocation {
			active, err := r.tokenActive(req.Context(), c.JTI)
			if err != nil {
				r.log.Warn("aauth: token status unavailable", logKeyError, err.Error())
				WriteProblem(w, &Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Detail: "the person server's token status could not be checked"})
				return
			}
			if !active {
				r.refuse(w, &SignatureError{Code: httpsig.CodeRevokedJWT, Detail: "auth token " + quote(c.JTI) + " revoked"})
				return
			}
		}
		if missing := missingScopes(r.scope(req), c.Scope); len(missing) > 0 {
			WriteProblem(w, &Problem{Status: http.StatusForbidden, Code: CodeInsufficientScope, Detail: "the auth token lacks scope " + strings.Join(missing, " ")})
			return
		}
		next.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), authContextKey{}, c)))
	})
}

func signed(req *http.Request) bool {
	h := req.Header
	return len(h.Values(httpsig.HeaderSignature)) > 0 || len(h.Values(httpsig.HeaderSignatureInput)) > 0 || len(h.Values(httpsig.HeaderSignatureKey)) > 0
}

func (r *Resource) scope(req *http.Request) string {
	if r.cfg.Scope == nil {
		return ""
	}
	return r.cfg.Scope(req)
}

// missingScopes returns the scopes in need that have is missing.
func missingScopes(need, have string) []string {
	got := strings.Fields(have)
	var missing []string
	for _, s := range strings.Fields(need) {
		if !slices.Contains(got, s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// resolve verifies the token in Signature-Key and returns the key it binds
// (cnf.jwk). Issuers are checked against the configuration before any
// metadata is fetched.
func (r *Resource) resolve(ctx context.Context, now time.Time, v *verification) func(httpsig.SignatureKey) (ed25519.PublicKey, error) {
	return func(sk httpsig.SignatureKey) (ed25519.PublicKey, error) {
		typ, _, iss, err := identity.Peek(sk.JWT)
		if err != nil {
			return nil, tokenError(err)
		}
		switch typ {
		case identity.TypAgent:
			if !slices.Contains(r.providers, iss) {
				return nil, &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: "agent provider " + quote(iss) + " is not trusted"}
			}
			c, err := identity.VerifyAgentToken(sk.JWT, now, r.keys(ctx, iss, identity.DWK, v))
			if err != nil {
				return nil, r.keyError(v, err)
			}
			v.agent = c
			return c.Cnf.JWK.PublicKey()
		case identity.TypAuth:
			if iss != r.cfg.PersonServer {
				return nil, &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: "auth token issuer " + quote(iss) + " is not the person server"}
			}
			c, err := identity.VerifyAuthToken(sk.JWT, now, r.keys(ctx, iss, identity.DWKPerson, v))
			if err != nil {
				return nil, r.keyError(v, err)
			}
			if c.Aud != r.cfg.Issuer {
				return nil, &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: "auth token aud " + quote(c.Aud) + " is not this resource"}
			}
			v.auth = c
			return c.Cnf.JWK.PublicKey()
		}
		return nil, &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: "token typ " + quote(typ) + ": an agent token or an auth token is required"}
	}
}

// keys resolves iss's kids through discovery and records why a lookup
// failed: identity reports every failed lookup as invalid_key.
func (r *Resource) keys(ctx context.Context, iss, dwk string, v *verification) func(string) (ed25519.PublicKey, error) {
	resolve := r.disc.Keys(ctx, iss, dwk)
	return func(kid string) (ed25519.PublicKey, error) {
		k, err := resolve(kid)
		if err != nil {
			v.keyErr = err
			if errors.Is(err, ErrUnavailable) {
				v.unavailable = err
			}
		}
		return k, err
	}
}

// keyError turns a token verification error into a SignatureError,
// preferring the discovery refusal (issuer_mismatch, unknown_key...) when
// the key lookup was what failed.
func (r *Resource) keyError(v *verification, err error) error {
	var se *SignatureError
	if v.keyErr != nil && errors.As(v.keyErr, &se) {
		return se
	}
	return tokenError(err)
}

// tokenError maps an identity error to a SignatureError with the same code.
func tokenError(err error) *SignatureError {
	var se *SignatureError
	if errors.As(err, &se) {
		return se
	}
	var ie *identity.Error
	if errors.As(err, &ie) {
		return &SignatureError{Code: httpsig.Code(ie.Code), Detail: ie.Detail}
	}
	return &SignatureError{Code: httpsig.CodeInvalidJWT, Detail: err.Error()}
}

// refuse answers a refused signature or token.
func (r *Resource) refuse(w http.ResponseWriter, err error) {
	se := tokenError(err)
	// The detail may quote the request: the sender must not choose the
	// size of the line.
	r.log.Info("aauth: request refused", logKeyCode, string(se.Code), logKeyDetail, httpsig.BoundDetail(se.Detail))
	WriteSignatureError(w, se)
}

func (r *Resource) challenge(w http.ResponseWriter, requirement string, params map[string]string, p *Problem) {
	v, err := formatRequirement(requirement, params)
	if err != nil {
		r.log.Error("aauth: formatting AAuth-Requirement", logKeyError, err.Error())
		WriteProblem(w, &Problem{Status: http.StatusInternalServerError, Code: CodeServerError})
		return
	}
	w.Header().Set(HeaderRequirement, v)
	WriteProblem(w, p)
}

func (r *Resource) challengeAuth(w http.ResponseWriter, req *http.Request, agent *AgentClaims) {
	rt, err := r.IssueResourceToken(agent, agent.JTI, r.scope(req))
	if err != nil {
		r.log.Error("aauth: issuing a resource token", logKeyError, err.Error())
		WriteProblem(w, &Problem{Status: http.StatusInternalServerError, Code: CodeServerError})
		return
	}
	r.challenge(w, RequirementAuthToken, map[string]string{"resource-token": rt},
		&Problem{Status: http.StatusUnauthorized, Code: CodeAuthTokenRequired, Detail: "exchange the resource token at your person server for an auth token"})
}

// IssueResourceToken issues a resource token for the agent whose verified
// claims are agent, naming the jti of the token the request carried and the
// scopes the request needs.
func (r *Resource) IssueResourceToken(agent *AgentClaims, presentedJTI, scope string) (string, error) {
	if agent == nil {
		return "", errors.New("aauth: IssueResourceToken: no agent claims")
	}
	if _, err := agent.Cnf.JWK.PublicKey(); err != nil {
		return "", fmt.Errorf("aauth: IssueResourceToken: agent cnf.jwk: %w", err)
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	iat := r.cfg.Now().Unix()
	return identity.IssueResourceToken(r.key, identity.ResourceClaims{
		AgentJKT:     identity.Thumbprint(agent.Cnf.JWK),
		Aud:          r.cfg.PersonServer,
		DWK:          identity.DWKResource,
		Exp:          iat + int64(r.cfg.ResourceTokenLifetime/time.Second),
		IAT:          iat,
		Iss:          r.cfg.Issuer,
		JTI:          base64.RawURLEncoding.EncodeToString(jti[:]),
		PresentedJTI: presentedJTI,
		PS:           r.cfg.PersonServer,
		Scope:        scope,
	})
}

// tokenActive asks the person server's token_status_endpoint about jti.
func (r *Resource) tokenActive(ctx context.Context, jti string) (bool, error) {
	m, err := r.disc.Metadata(ctx, r.cfg.PersonServer, identity.DWKPerson)
	if err != nil {
		return false, err
	}
	if m.TokenStatusEndpoint == "" {
		return false, errors.New("the person server's metadata has no token_status_endpoint")
	}
	u, err := url.Parse(m.TokenStatusEndpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return false, fmt.Errorf("token_status_endpoint %s is not an http(s) URL", quote(m.TokenStatusEndpoint))
	}
	q := u.Query()
	q.Set("jti", jti)
	u.RawQuery = q.Encode()
	body, err := getJSON(ctx, r.client, u.String())
	if err != nil {
		return false, err
	}
	var st TokenStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return false, fmt.Errorf("token status answer is not JSON: %v", err)
	}
	if st.JTI != jti {
		return false, fmt.Errorf("token status answer is about jti %s, not %s", quote(st.JTI), quote(jti))
	}
	return st.Active, nil
}

// MetadataHandler serves GET {issuer path}/.well-known/aauth-resource.json
// ({issuer, jwks_uri}) and {issuer path}/.well-known/aauth-resource-jwks.json.
// Other paths are 404.
func (r *Resource) MetadataHandler() http.Handler {
	metaPath := r.issuerPath + "/.well-known/" + identity.DWKResource
	jwksPath := r.issuerPath + "/.well-known/aauth-resource-jwks.json"
	meta, _ := json.Marshal(Metadata{Issuer: r.cfg.Issuer, JWKSURI: r.cfg.Issuer + "/.well-known/aauth-resource-jwks.json"})
	jwks, _ := json.Marshal(identity.JWKS{Keys: []identity.JWK{r.jwk}})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body []byte
		switch req.URL.EscapedPath() {
		case metaPath:
			body = meta
		case jwksPath:
			body = jwks
		default:
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			WriteProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=600")
		_, _ = w.Write(append(body, '\n'))
	})
}
