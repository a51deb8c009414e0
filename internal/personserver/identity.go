package personserver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
	"github.com/kin-agents/kin/internal/keyring"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Server is kin's identity provider and person server: it answers
// kin.IdentityService and serves the public AAuth endpoints (Handler).
type Server struct {
	cfg      Config
	st       store.Store
	lin      *lineage.Tree
	disc     *aauth.Discovery // resources' keys, for their resource tokens
	replays  *httpsig.Replays // signatures accepted in the last window
	log      *slog.Logger
	refusals *refusalLog // refusals not recorded
	id       *identityState
	fleet    fleetKeys // the fleet's published keys
	addrs    hostAddrs // the fleet's other hosts' addresses (signedForAnotherHost)
	closing  chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// Config is what a Server is built from.
type Config struct {
	Home          string        // its keys are under <Home>/keys/
	TokenLifetime time.Duration // agent tokens' lifetime; 0: identity.DefaultLifetime
	Issuer        string        // iss of every token; "": http://<the HTTP address> (SetIssuer)
	PersonServer  string        // the ps claim: "" kin itself, "off" none, else that URL
	Store         store.Store
	Lineage       *lineage.Tree
	Clock         func() time.Time
	Log           *slog.Logger
	// SingleLevel reports whether seed 004 §3's rule is in force (the
	// aauth profile): a sub-agent may not have sub-agents.
	SingleLevel func() bool
	// KeyPath is where an agent finds its private key (its ctx session),
	// "" where it has none.
	KeyPath func(id kin.AgentID) string
	// ReplayCapacity bounds the signatures remembered against replay;
	// 0: httpsig.DefaultReplayCapacity.
	ReplayCapacity int
	// Quota limits how often an agent asks for auth tokens (each answer,
	// issued or refused, is an event); nil: no limit.
	Quota *quota.Limiter
	// Host is this daemon's host in the fleet: its public keys are
	// published in the store under it, and it verifies and serves every
	// host's ("": its own keys alone, and its own issuer).
	Host string
}

// New opens the signing keys under the home (making them the first time)
// and starts pruning expired auth tokens until Close.
func New(c Config) (*Server, error) {
	srv := &Server{cfg: c, st: c.Store, lin: c.Lineage, log: c.Log, closing: make(chan struct{}),
		disc: &aauth.Discovery{Now: c.Clock}, replays: httpsig.NewReplays(c.Clock(), c.ReplayCapacity)}
	if srv.log == nil {
		srv.log = slog.New(slog.DiscardHandler)
	}
	srv.refusals = newRefusalLog(srv.log, c.Clock)
	if err := srv.openIdentity(); err != nil {
		return nil, err
	}
	srv.wg.Add(1)
	go srv.pruneAuthTokens()
	return srv, nil
}

// Close stops the pruner and waits for it.
func (srv *Server) Close() {
	srv.once.Do(func() { close(srv.closing) })
	srv.wg.Wait()
}

func (srv *Server) now() time.Time { return srv.cfg.Clock() }

// authorize checks that the caller may act on target.
func (srv *Server) authorize(ctx context.Context, target kin.AgentID, self bool) error {
	return caller.MayActOn(ctx, target, self, srv.lin.IsDescendant)
}

// identityState is kin's side of AAuth (seed 004): the agent provider that
// gives every spawned agent a key and agent tokens, and the person server
// that issues auth tokens to sub-agents through their parents.
type identityState struct {
	issuer string // iss of every token kin signs; "" until known
	domain string // the domain of agent identifiers: the issuer's host
	ps     string // the ps claim; "" for none
	life   time.Duration

	ap, person *keyring.Ring

	mu       sync.Mutex
	tokens   map[kin.AgentID]cachedToken      // agent tokens, reused until half-life
	locals   map[kin.AgentID]string           // agents' local parts
	verified map[string]*identity.AgentClaims // agent tokens whose signature verified
	keys     map[string]store.AgentKeyRow     // agents' keys by thumbprint (never change)
	active   map[kin.AgentID]activeAgent      // agents last read live and active
	gen      uint64                           // counts forgetTokens: a read older is not cached
	// forgotten are the agents forgetTokens dropped in the last
	// activeFor: a record read meanwhile may predate the commit that
	// changed them, so none is cached.
	forgotten map[kin.AgentID]time.Time
}

// activeAgent is an agent read live and active from the store at a time:
// kept until an event says it changed (Followed), and at most activeFor.
type activeAgent struct {
	agent *kin.Agent
	at    time.Time
}

// activeFor bounds how long a live agent's record is trusted without an
// event: the follower's own bound on a wake-up it missed.
const activeFor = 5 * time.Second

// activeAgent returns the agent's record while cached, or nil.
func (s *identityState) activeAgent(id kin.AgentID, now time.Time) (*kin.Agent, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.active[id]
	if !ok || now.Sub(e.at) > activeFor || e.at.After(now) {
		return nil, s.gen
	}
	a := *e.agent
	return &a, s.gen
}

// mayCache reports whether what was read of id at now may be cached: it
// was not forgotten in the last activeFor. s.mu is held.
func (s *identityState) mayCache(id kin.AgentID, now time.Time) bool {
	at, ok := s.forgotten[id]
	return !ok || now.Sub(at) > activeFor || at.After(now)
}

// rememberActive caches a live, active agent read at now, unless an agent
// was forgotten since the read began (gen).
func (s *identityState) rememberActive(a *kin.Agent, now time.Time, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen || !s.mayCache(a.ID, now) {
		return
	}
	if len(s.active) >= maxVerified {
		clear(s.active)
	}
	s.active[a.ID] = activeAgent{agent: a, at: now}
}

// agentKey returns the key row with the thumbprint, cached.
func (s *identityState) agentKey(jkt string) (store.AgentKeyRow, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[jkt]
	return k, ok
}

func (s *identityState) rememberKey(k store.AgentKeyRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) >= maxVerified {
		clear(s.keys)
	}
	s.keys[k.JKT] = k
}

// maxVerified bounds the verified-token cache; it is emptied when full.
const maxVerified = 4096

// verifiedClaims returns the claims of an agent token kin verified before,
// while it has not expired: the token is the exact string kin signed, so its
// signature and claims need no second check (the registry checks do run).
func (s *identityState) verifiedClaims(token string, now time.Time) *identity.AgentClaims {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.verified[token]
	if c == nil || now.Unix() >= c.Exp {
		return nil
	}
	return c
}

func (s *identityState) rememberVerified(token string, c *identity.AgentClaims) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.verified) >= maxVerified {
		clear(s.verified)
	}
	s.verified[token] = c
}

type cachedToken struct {
	token  string
	claims *identity.AgentClaims
}

// Identity defaults.
const (
	keysDir = "keys"
	// keyKeep is how long a rotated-out key stays published: longer than
	// any token it signed can live.
	keyKeep = identity.MaxLifetime + time.Hour
)

// openIdentity loads or creates the signing keys under the home.
func (srv *Server) openIdentity() error {
	life := srv.cfg.TokenLifetime
	if life == 0 {
		life = identity.DefaultLifetime
	}
	if life < time.Minute || life > identity.MaxLifetime {
		return fmt.Errorf("agent token lifetime %v: must be between 1m and 24h", life)
	}
	now := srv.now()
	ap, err := keyring.Open(filepath.Join(srv.cfg.Home, keysDir, kin.KeyRoleAgent), "ap", keyKeep, now)
	if err != nil {
		return err
	}
	ps, err := keyring.Open(filepath.Join(srv.cfg.Home, keysDir, kin.KeyRolePerson), "ps", identity.MaxAuthLifetime+time.Hour, now)
	if err != nil {
		return err
	}
	srv.id = &identityState{ap: ap, person: ps, life: life, tokens: map[kin.AgentID]cachedToken{}, locals: map[kin.AgentID]string{}, verified: map[string]*identity.AgentClaims{},
		keys: map[string]store.AgentKeyRow{}, active: map[kin.AgentID]activeAgent{}, forgotten: map[kin.AgentID]time.Time{}}
	return nil
}

// SetIssuer fixes the issuer once the HTTP address is known: Config.Issuer,
// else http://<httpAddr> ("": no HTTP address).
//
// In a fleet the issuer is the fleet's: the first host records its own in
// the store, and the others take it (one given another --issuer is
// refused), so that an agent's identifier is the same on every host. Then
// the host publishes its public keys in the store, for every host to
// verify and serve.
func (srv *Server) SetIssuer(httpAddr string) error {
	iss := srv.cfg.Issuer
	if iss == "" && httpAddr != "" {
		iss = "http://" + httpAddr
	}
	if iss != "" {
		u, err := url.Parse(iss)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("issuer %q: must be an http(s) URL with a host and no path", iss)
		}
		iss = strings.TrimSuffix(iss, "/")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iss, err := srv.fleetIssuer(ctx, iss, srv.cfg.Issuer != "")
	if err != nil {
		return err
	}
	// A host the fleet accepts publishes its keys.
	for _, role := range []string{kin.KeyRoleAgent, kin.KeyRolePerson} {
		if err := srv.publishKeys(ctx, role, false); err != nil {
			return err
		}
	}
	if iss == "" {
		return nil // identity answers "no issuer" until configured
	}
	u, err := url.Parse(iss)
	if err != nil {
		return fmt.Errorf("the fleet's issuer %q: %w", iss, err)
	}
	srv.id.issuer = iss
	srv.id.domain = u.Hostname()
	switch srv.cfg.PersonServer {
	case "":
		srv.id.ps = srv.id.issuer // kin is the person server
	case "off":
		srv.id.ps = ""
	default:
		srv.id.ps = strings.TrimSuffix(srv.cfg.PersonServer, "/")
	}
	return nil
}

func (srv *Server) needIssuer() error {
	if srv.id.issuer == "" {
		return kin.Errorf(kin.ECodeUnavailable, "kin has no AAuth issuer: start kin serve with an HTTP address (--http) or --issuer URL")
	}
	return nil
}

// singleLevel is seed 004 §3's rule, in force under the aauth profile:
// a sub-agent may not have sub-agents.
func (srv *Server) singleLevel() bool {
	return srv.cfg.SingleLevel != nil && srv.cfg.SingleLevel()
}

// localPart maps an agent name to an AAuth local part: names are already in
// the local part's alphabet except '@' and ':', which become "--" and "..".
// Names never hold two separators in a row, so the mapping is one to one.
func localPart(name string) string {
	return strings.NewReplacer("@", "--", ":", "..").Replace(name)
}

// NewAgentKey makes a spawned agent's key pair: the private key as the PEM
// its session gets, the public half as the row the store keeps. The local
// part is its parent's local part, '+' and its own, when the parent has an
// AAuth identity; its own otherwise (a top-level agent).
func (srv *Server) NewAgentKey(ctx context.Context, a *kin.Agent) ([]byte, store.AgentKeyRow, error) {
	k, err := NewKeyPair()
	if err != nil {
		return nil, store.AgentKeyRow{}, err
	}
	row, err := srv.AgentKeyRow(ctx, srv.st, a, k)
	if err != nil {
		clear(k.PEM)
		return nil, store.AgentKeyRow{}, err
	}
	return k.PEM, row, nil
}

// KeyPair is a new agent key before its agent exists: the private key as
// the PEM its session gets, and the public half.
type KeyPair struct {
	PEM    []byte
	Public ed25519.PublicKey
}

// NewKeyPair makes an agent's key pair (a spawn makes it before it
// registers the agent, so that the key's row joins the registration's
// transaction).
func NewKeyPair() (KeyPair, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return KeyPair{}, err
	}
	pemKey, err := aauth.MarshalKey(priv)
	clear(priv) // the daemon keeps only the public half
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{PEM: pemKey, Public: pub}, nil
}

// AgentKeyRow is the row the store keeps of a's key k: the public half and
// the local part, its parent's local part, '+' and its own when the parent
// has an AAuth identity, its own otherwise (a top-level agent). r reads the
// parent's key where it is not cached: the store, or the transaction that
// registers a.
func (srv *Server) AgentKeyRow(ctx context.Context, r store.Reader, a *kin.Agent, k KeyPair) (store.AgentKeyRow, error) {
	local := localPart(a.Name)
	if a.Parent != 0 {
		if pl, ok, err := srv.localIn(ctx, r, a.Parent); err != nil {
			return store.AgentKeyRow{}, err
		} else if ok {
			local = pl + "+" + local
		}
	}
	return store.AgentKeyRow{Agent: a.ID, JKT: identity.Thumbprint(identity.PublicJWK(k.Public, "")), PublicKey: k.Public, Local: local, CreatedAt: srv.now()}, nil
}

// localOf returns an agent's local part, and false when it has no key.
func (srv *Server) localOf(ctx context.Context, id kin.AgentID) (string, bool, error) {
	return srv.localIn(ctx, srv.st, id)
}

// localIn is localOf reading r where the local part is not cached.
func (srv *Server) localIn(ctx context.Context, r store.Reader, id kin.AgentID) (string, bool, error) {
	srv.id.mu.Lock()
	l, ok := srv.id.locals[id]
	srv.id.mu.Unlock()
	if ok {
		return l, true, nil
	}
	row, err := r.AgentKeyGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	srv.RememberLocal(id, row.Local)
	return row.Local, true, nil
}

func (srv *Server) RememberLocal(id kin.AgentID, local string) {
	srv.id.mu.Lock()
	srv.id.locals[id] = local
	srv.id.mu.Unlock()
}

func (srv *Server) sub(local string) string { return "aauth:" + local + "@" + srv.id.domain }

func newJTI() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Token returns the calling agent's agent token.
func (srv *Server) Token(ctx context.Context) (*kin.AgentToken, error) {
	c := caller.Of(ctx)
	if c.Refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	if c.Agent == 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "kin token prints the calling agent's token: run it inside an agent that kin spawned")
	}
	tok, claims, err := srv.agentToken(ctx, c.Agent)
	if err != nil {
		return nil, err
	}
	out := &kin.AgentToken{Token: tok, Sub: claims.Sub, Issuer: claims.Iss, ExpiresAt: time.Unix(claims.Exp, 0).UTC(), ParentAgent: claims.ParentAgent}
	if srv.cfg.KeyPath != nil {
		out.KeyPath = srv.cfg.KeyPath(c.Agent)
	}
	return out, nil
}

// agentToken issues (or reuses, until half its lifetime is gone) an agent's
// token. A sub-agent's names its parent and ends no later than the parent's;
// under the aauth profile a sub-agent's child gets none.
func (srv *Server) agentToken(ctx context.Context, id kin.AgentID) (string, *identity.AgentClaims, error) {
	if err := srv.needIssuer(); err != nil {
		return "", nil, err
	}
	now := srv.now()
	srv.id.mu.Lock()
	ct, ok := srv.id.tokens[id]
	srv.id.mu.Unlock()
	if ok && now.Unix() < ct.claims.IAT+(ct.claims.Exp-ct.claims.IAT)/2 {
		return ct.token, ct.claims, nil
	}
	a, err := srv.st.AgentGetByID(ctx, id)
	if err != nil {
		return "", nil, store.KinError(err)
	}
	if !a.Live() || a.Status != kin.StatusActive {
		return "", nil, kin.Errorf(kin.ECodeForbidden, "agent %d is %s: it gets no token", id, a.Status)
	}
	row, err := srv.st.AgentKeyGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, kin.Errorf(kin.ECodeNotFound, "agent %d has no AAuth key: only agents kin spawned have one", id)
	}
	if err != nil {
		return "", nil, store.KinError(err)
	}
	c := identity.AgentClaims{
		Cnf: identity.Confirmation{JWK: identity.PublicJWK(row.PublicKey, "")},
		DWK: identity.DWK, Iss: srv.id.issuer, JTI: newJTI(), IAT: now.Unix(), Exp: now.Add(srv.id.life).Unix(),
		PS: srv.id.ps, Sub: srv.sub(row.Local),
	}
	var tok string
	var parent *identity.AgentClaims
	if a.Parent != 0 {
		if _, ok, err := srv.localOf(ctx, a.Parent); err != nil {
			return "", nil, store.KinError(err)
		} else if ok {
			if _, parent, err = srv.agentToken(ctx, a.Parent); err != nil {
				return "", nil, kin.Errorf(kin.ECodeForbidden, "agent %d's parent %d has no token, so it gets none: %v", id, a.Parent, err)
			}
		}
	}
	if parent == nil {
		tok, err = identity.IssueAgentToken(srv.id.ap.Current(), c)
	} else {
		if parent.ParentAgent != "" && srv.singleLevel() {
			return "", nil, kin.Errorf(kin.ECodeSpawnDepth, "agent %d's parent is itself a sub-agent: the aauth profile allows one level of sub-agents (seed 004 §3)", id)
		}
		c.Exp = min(c.Exp, parent.Exp)
		var opts []identity.SubAgentOption
		if srv.singleLevel() {
			opts = append(opts, identity.SingleLevel())
		}
		tok, err = identity.IssueSubAgentToken(srv.id.ap.Current(), *parent, c, opts...)
	}
	if err != nil {
		return "", nil, kin.Errorf(kin.ECodeInternal, "issue agent %d's token: %v", id, err)
	}
	if parent != nil {
		c.ParentAgent = parent.Sub
	}
	srv.id.mu.Lock()
	if srv.id.mayCache(id, now) {
		srv.id.tokens[id] = cachedToken{token: tok, claims: &c}
	}
	srv.id.mu.Unlock()
	return tok, &c, nil
}

// forgetTokens drops what is cached of agents (their agent tokens, their
// records), so a changed agent is read again from the store.
func (srv *Server) forgetTokens(ids []kin.AgentID) {
	now := srv.now()
	srv.id.mu.Lock()
	srv.id.gen++
	if len(srv.id.forgotten) >= maxVerified {
		for id, at := range srv.id.forgotten {
			if now.Sub(at) > activeFor || at.After(now) {
				delete(srv.id.forgotten, id)
			}
		}
	}
	for _, id := range ids {
		delete(srv.id.tokens, id)
		delete(srv.id.active, id)
		srv.id.forgotten[id] = now
	}
	srv.id.mu.Unlock()
}

// forgetAgent is forgetTokens of one agent (0: none).
func (srv *Server) forgetAgent(id kin.AgentID) {
	if id != 0 {
		srv.forgetTokens([]kin.AgentID{id})
	}
}

// topLevel reports whether an agent is a top-level AAuth agent: it has a key
// and its parent has none (or it has no parent).
func (srv *Server) topLevel(ctx context.Context, a *kin.Agent) (bool, error) {
	if a.Parent == 0 {
		return true, nil
	}
	_, ok, err := srv.localOf(ctx, a.Parent)
	return !ok, err
}

// Grant records a top-level agent's grant (operator only).
func (srv *Server) Grant(ctx context.Context, req kin.GrantRequest) (*kin.Grant, error) {
	if err := caller.OperatorOnly(ctx, "grant"); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	req.Resource = strings.TrimSuffix(req.Resource, "/")
	now := srv.now()
	if !req.Until.IsZero() && !req.Until.After(now) {
		return nil, kin.Errorf(kin.ECodeInvalid, "--until %s is not in the future", req.Until.Format(time.RFC3339))
	}
	a, err := srv.st.AgentGetByID(ctx, req.Agent)
	if err != nil {
		return nil, store.KinError(err)
	}
	if top, err := srv.topLevel(ctx, a); err != nil {
		return nil, store.KinError(err)
	} else if !top {
		return nil, kin.Errorf(kin.ECodeInvalid, "agent %d (%s) is a sub-agent: grants are kept for top-level agents only (seed 004), and its parent's grant covers it", a.ID, a.Name)
	}
	if !a.Live() {
		return nil, kin.Errorf(kin.ECodeInvalidTransition, "agent %d is %s: it cannot hold a grant", a.ID, a.Status)
	}
	g := kin.Grant{Agent: a.ID, Resource: req.Resource, Scope: strings.Join(strings.Fields(req.Scope), " "), Until: req.Until.UTC(), CreatedAt: now}
	err = store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		g.Revoked = 0
		old, err := tx.GrantList(ctx, a.ID)
		if err != nil {
			return err
		}
		for _, o := range old {
			narrowed := !kin.ScopeCovers(g.Scope, o.Scope) || (!g.Until.IsZero() && (o.Until.IsZero() || g.Until.Before(o.Until)))
			if o.Resource == g.Resource && narrowed {
				n, err := srv.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Parent: a.ID, Resource: g.Resource}, "grant narrowed")
				if err != nil {
					return err
				}
				g.Revoked = n
			}
		}
		if err := tx.GrantSet(ctx, store.GrantRow{Agent: g.Agent, Resource: g.Resource, Scope: g.Scope, Until: g.Until, CreatedAt: now}); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, now, kin.EventGrant, a.ID, a.Parent, kin.GrantData{Agent: a.ID, Resource: g.Resource, Scope: g.Scope, Until: g.Until, Action: "granted"})
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	return &g, nil
}

// Grants lists grants.
func (srv *Server) Grants(ctx context.Context, agent kin.AgentID) ([]kin.Grant, error) {
	if err := caller.OperatorOnly(ctx, "list grants"); err != nil {
		return nil, err
	}
	rows, err := srv.st.GrantList(ctx, agent)
	if err != nil {
		return nil, store.KinError(err)
	}
	out := make([]kin.Grant, 0, len(rows))
	for _, r := range rows {
		out = append(out, kin.Grant{Agent: r.Agent, Resource: r.Resource, Scope: r.Scope, Until: r.Until, CreatedAt: r.CreatedAt})
	}
	return out, nil
}

// Ungrant removes a grant and revokes what was issued under it.
func (srv *Server) Ungrant(ctx context.Context, req kin.UngrantRequest) (*kin.Grant, error) {
	if err := caller.OperatorOnly(ctx, "remove a grant"); err != nil {
		return nil, err
	}
	if err := kin.ValidResource(req.Resource); err != nil {
		return nil, err
	}
	req.Resource = strings.TrimSuffix(req.Resource, "/")
	var out *kin.Grant
	now := srv.now()
	err := store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		out = nil
		rows, err := tx.GrantList(ctx, req.Agent)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.Resource == req.Resource {
				out = &kin.Grant{Agent: r.Agent, Resource: r.Resource, Scope: r.Scope, Until: r.Until, CreatedAt: r.CreatedAt}
			}
		}
		if out == nil {
			return nil
		}
		if _, err := tx.GrantDelete(ctx, req.Agent, req.Resource); err != nil {
			return err
		}
		if out.Revoked, err = srv.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Parent: req.Agent, Resource: req.Resource}, "grant removed"); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, now, kin.EventGrant, req.Agent, 0, kin.GrantData{Agent: req.Agent, Resource: req.Resource, Scope: out.Scope, Action: "ungranted", Revoked: out.Revoked})
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	if out == nil {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d has no grant for %s", req.Agent, req.Resource)
	}
	return out, nil
}

// AuthTokens lists issued auth tokens. An agent sees those of its subtree.
func (srv *Server) AuthTokens(ctx context.Context, f kin.AuthTokenFilter) ([]kin.AuthToken, error) {
	c := caller.Of(ctx)
	if !c.Operator() {
		if f.Agent == 0 {
			f.Agent = c.Agent
		}
		if err := srv.authorize(ctx, f.Agent, true); err != nil {
			return nil, err
		}
	}
	now := srv.now()
	since := now
	if f.Expired {
		since = time.Time{}
	}
	rows, err := srv.st.AuthTokenList(ctx, f.Agent, since)
	if err != nil {
		return nil, store.KinError(err)
	}
	out := make([]kin.AuthToken, 0, len(rows))
	for _, r := range rows {
		t := kin.AuthToken{JTI: r.JTI, Agent: r.Agent, Parent: r.Parent, Resource: r.Resource, Scope: r.Scope,
			IssuedAt: r.IssuedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, RevokedReason: r.RevokedReason, State: kin.TokenActive}
		switch {
		case !r.RevokedAt.IsZero():
			t.State = kin.TokenRevoked
		case !now.Before(r.ExpiresAt):
			t.State = kin.TokenExpired
		}
		out = append(out, t)
	}
	return out, nil
}

// RotateKeys rotates a role's signing key (operator only).
func (srv *Server) RotateKeys(ctx context.Context, role string) (*kin.KeyRotation, error) {
	if err := caller.OperatorOnly(ctx, "rotate keys"); err != nil {
		return nil, err
	}
	var ring *keyring.Ring
	switch role {
	case kin.KeyRoleAgent:
		ring = srv.id.ap
	case kin.KeyRolePerson:
		ring = srv.id.person
	default:
		return nil, kin.Errorf(kin.ECodeInvalid, "role %q: want %s or %s", role, kin.KeyRoleAgent, kin.KeyRolePerson)
	}
	now := srv.now()
	k, err := ring.Rotate(now)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInternal, "%v", err)
	}
	out := &kin.KeyRotation{Role: role, KID: k.KID}
	// What the JWKS publishes once the new key is: the fleet's keys, this
	// host's and the others'.
	done := func() (*kin.KeyRotation, error) {
		for _, j := range srv.JWKS(role).Keys {
			out.Published = append(out.Published, j.KID)
		}
		return out, nil
	}
	if role == kin.KeyRoleAgent {
		srv.id.mu.Lock()
		clear(srv.id.tokens) // new tokens are signed with the new key
		srv.id.mu.Unlock()
	}
	if srv.cfg.Host != "" {
		// Published with its event, which tells the fleet's other hosts.
		if err := srv.publishKeys(ctx, role, true); err != nil {
			return nil, kin.Errorf(kin.ECodeUnavailable, "%v", err)
		}
		return done()
	}
	err = store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		return store.AppendEvent(ctx, tx, now, kin.EventKeysRotated, 0, 0, kin.KeysRotatedData{Role: role, KID: k.KID})
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	return done()
}

// Auth tokens are kept past their expiry for a day, for kin auth-tokens
// --expired, then pruned.
const (
	authTokenKeep = 24 * time.Hour
	pruneEvery    = 10 * time.Minute
)

// pruneAuthTokens deletes, every pruneEvery, the auth tokens that expired
// more than authTokenKeep ago, so the table holds about a day of issuance.
func (srv *Server) pruneAuthTokens() {
	defer srv.wg.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-srv.closing:
			return
		case <-t.C:
		}
		ctx := context.Background()
		err := store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
			return tx.AuthTokenPrune(ctx, srv.now().Add(-authTokenKeep))
		})
		if err != nil {
			srv.log.Error("prune expired auth tokens", "err", err)
		}
	}
}

// revokeTx revokes the auth tokens p selects, records one event for each
// (parent, sub-agent) pair, and returns how many it revoked.
func (srv *Server) revokeTx(ctx context.Context, tx store.Tx, now time.Time, p store.AuthTokenRevokeParams, reason string) (int, error) {
	p.At, p.Reason = now, reason
	rows, err := tx.AuthTokenRevoke(ctx, p)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	type pair struct{ agent, parent kin.AgentID }
	byPair := map[pair][]string{}
	var order []pair
	for _, r := range rows {
		k := pair{r.Agent, r.Parent}
		if _, ok := byPair[k]; !ok {
			order = append(order, k)
		}
		byPair[k] = append(byPair[k], r.JTI)
	}
	for _, k := range order {
		if err := store.AppendEvent(ctx, tx, now, kin.EventTokenRevoked, k.agent, k.parent, kin.TokenRevokedData{Agent: k.agent, Parent: k.parent, JTIs: byPair[k], Reason: reason}); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// RevokeAgentsTx revokes the auth tokens bound to or obtained by ids and
// forgets their agent tokens: they were suspended, revoked or stopped.
func (srv *Server) RevokeAgentsTx(ctx context.Context, tx store.Tx, now time.Time, ids []kin.AgentID, reason string) error {
	if srv.id == nil || len(ids) == 0 {
		return nil
	}
	srv.forgetTokens(ids)
	_, err := srv.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Agents: ids}, reason)
	return err
}
