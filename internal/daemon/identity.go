package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/identity"
	"github.com/kin-agents/kin/internal/keyring"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

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
func (d *Daemon) openIdentity() error {
	life := d.cfg.AgentTokenLifetime
	if life == 0 {
		life = identity.DefaultLifetime
	}
	if life < time.Minute || life > identity.MaxLifetime {
		return fmt.Errorf("agent token lifetime %v: must be between 1m and 24h", life)
	}
	now := d.now()
	ap, err := keyring.Open(filepath.Join(d.cfg.Home, keysDir, kin.KeyRoleAgent), "ap", keyKeep, now)
	if err != nil {
		return err
	}
	ps, err := keyring.Open(filepath.Join(d.cfg.Home, keysDir, kin.KeyRolePerson), "ps", identity.MaxAuthLifetime+time.Hour, now)
	if err != nil {
		return err
	}
	d.id = &identityState{ap: ap, person: ps, life: life, tokens: map[kin.AgentID]cachedToken{}, locals: map[kin.AgentID]string{}, verified: map[string]*identity.AgentClaims{}}
	return nil
}

// setIssuer fixes the issuer once the HTTP address is known: Config.Issuer,
// else http://<the address the API listens on>.
func (d *Daemon) setIssuer() error {
	iss := d.cfg.Issuer
	if iss == "" && d.tcpLn != nil {
		iss = "http://" + d.tcpLn.Addr().String()
	}
	if iss == "" {
		return nil // identity answers "no issuer" until configured
	}
	u, err := url.Parse(iss)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("issuer %q: must be an http(s) URL with a host and no path", iss)
	}
	d.id.issuer = strings.TrimSuffix(iss, "/")
	d.id.domain = u.Hostname()
	switch d.cfg.PersonServer {
	case "":
		d.id.ps = d.id.issuer // kin is the person server
	case "off":
		d.id.ps = ""
	default:
		d.id.ps = strings.TrimSuffix(d.cfg.PersonServer, "/")
	}
	return nil
}

func (d *Daemon) needIssuer() error {
	if d.id.issuer == "" {
		return kin.Errorf(kin.ECodeUnavailable, "kin has no AAuth issuer: start kin serve with an HTTP address (--http) or --issuer URL")
	}
	return nil
}

// singleLevel is seed 004 §3's rule, in force under the aauth profile:
// a sub-agent may not have sub-agents.
func (d *Daemon) singleLevel() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.profile.Name == "aauth"
}

// localPart maps an agent name to an AAuth local part: names are already in
// the local part's alphabet except '@' and ':', which become "--" and "..".
// Names never hold two separators in a row, so the mapping is one to one.
func localPart(name string) string {
	return strings.NewReplacer("@", "--", ":", "..").Replace(name)
}

// newAgentKey makes a spawned agent's key pair: the private key as the PEM
// its session gets, the public half as the row the store keeps. The local
// part is its parent's local part, '+' and its own, when the parent has an
// AAuth identity; its own otherwise (a top-level agent).
func (d *Daemon) newAgentKey(ctx context.Context, a *kin.Agent) ([]byte, store.AgentKeyRow, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, store.AgentKeyRow{}, err
	}
	pemKey, err := aauth.MarshalKey(priv)
	clear(priv) // the daemon keeps only the public half
	if err != nil {
		return nil, store.AgentKeyRow{}, err
	}
	local := localPart(a.Name)
	if a.Parent != 0 {
		if pl, ok, err := d.localOf(ctx, a.Parent); err != nil {
			return nil, store.AgentKeyRow{}, err
		} else if ok {
			local = pl + "+" + local
		}
	}
	row := store.AgentKeyRow{Agent: a.ID, JKT: identity.Thumbprint(identity.PublicJWK(pub, "")), PublicKey: pub, Local: local, CreatedAt: d.now()}
	return pemKey, row, nil
}

// localOf returns an agent's local part, and false when it has no key.
func (d *Daemon) localOf(ctx context.Context, id kin.AgentID) (string, bool, error) {
	d.id.mu.Lock()
	l, ok := d.id.locals[id]
	d.id.mu.Unlock()
	if ok {
		return l, true, nil
	}
	row, err := d.store.AgentKeyGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	d.rememberLocal(id, row.Local)
	return row.Local, true, nil
}

func (d *Daemon) rememberLocal(id kin.AgentID, local string) {
	d.id.mu.Lock()
	d.id.locals[id] = local
	d.id.mu.Unlock()
}

func (d *Daemon) sub(local string) string { return "aauth:" + local + "@" + d.id.domain }

func newJTI() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Token returns the calling agent's agent token.
func (d *Daemon) Token(ctx context.Context) (*kin.AgentToken, error) {
	c := callerOf(ctx)
	if c.refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
	if c.agent == 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "kin token prints the calling agent's token: run it inside an agent that kin spawned")
	}
	tok, claims, err := d.agentToken(ctx, c.agent)
	if err != nil {
		return nil, err
	}
	out := &kin.AgentToken{Token: tok, Sub: claims.Sub, Issuer: claims.Iss, ExpiresAt: time.Unix(claims.Exp, 0).UTC(), ParentAgent: claims.ParentAgent}
	d.ctxMu.Lock()
	if cx := d.ctxAgents[c.agent]; cx != nil && cx.session.Agent != "" {
		out.KeyPath = filepath.Join(d.ctx.Dir(cx.session), ctxfs.FileAgentKey)
	}
	d.ctxMu.Unlock()
	return out, nil
}

// agentToken issues (or reuses, until half its lifetime is gone) an agent's
// token. A sub-agent's names its parent and ends no later than the parent's;
// under the aauth profile a sub-agent's child gets none.
func (d *Daemon) agentToken(ctx context.Context, id kin.AgentID) (string, *identity.AgentClaims, error) {
	if err := d.needIssuer(); err != nil {
		return "", nil, err
	}
	now := d.now()
	d.id.mu.Lock()
	ct, ok := d.id.tokens[id]
	d.id.mu.Unlock()
	if ok && now.Unix() < ct.claims.IAT+(ct.claims.Exp-ct.claims.IAT)/2 {
		return ct.token, ct.claims, nil
	}
	a, err := d.store.AgentGetByID(ctx, id)
	if err != nil {
		return "", nil, d.storeError(err)
	}
	if !a.Live() || a.Status != kin.StatusActive {
		return "", nil, kin.Errorf(kin.ECodeForbidden, "agent %d is %s: it gets no token", id, a.Status)
	}
	row, err := d.store.AgentKeyGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, kin.Errorf(kin.ECodeNotFound, "agent %d has no AAuth key: only agents kin spawned have one", id)
	}
	if err != nil {
		return "", nil, d.storeError(err)
	}
	c := identity.AgentClaims{
		Cnf: identity.Confirmation{JWK: identity.PublicJWK(row.PublicKey, "")},
		DWK: identity.DWK, Iss: d.id.issuer, JTI: newJTI(), IAT: now.Unix(), Exp: now.Add(d.id.life).Unix(),
		PS: d.id.ps, Sub: d.sub(row.Local),
	}
	var tok string
	var parent *identity.AgentClaims
	if a.Parent != 0 {
		if _, ok, err := d.localOf(ctx, a.Parent); err != nil {
			return "", nil, d.storeError(err)
		} else if ok {
			if _, parent, err = d.agentToken(ctx, a.Parent); err != nil {
				return "", nil, kin.Errorf(kin.ECodeForbidden, "agent %d's parent %d has no token, so it gets none: %v", id, a.Parent, err)
			}
		}
	}
	if parent == nil {
		tok, err = identity.IssueAgentToken(d.id.ap.Current(), c)
	} else {
		if parent.ParentAgent != "" && d.singleLevel() {
			return "", nil, kin.Errorf(kin.ECodeSpawnDepth, "agent %d's parent is itself a sub-agent: the aauth profile allows one level of sub-agents (seed 004 §3)", id)
		}
		c.Exp = min(c.Exp, parent.Exp)
		var opts []identity.SubAgentOption
		if d.singleLevel() {
			opts = append(opts, identity.SingleLevel())
		}
		tok, err = identity.IssueSubAgentToken(d.id.ap.Current(), *parent, c, opts...)
	}
	if err != nil {
		return "", nil, kin.Errorf(kin.ECodeInternal, "issue agent %d's token: %v", id, err)
	}
	if parent != nil {
		c.ParentAgent = parent.Sub
	}
	d.id.mu.Lock()
	d.id.tokens[id] = cachedToken{token: tok, claims: &c}
	d.id.mu.Unlock()
	return tok, &c, nil
}

// forgetTokens drops cached agent tokens, so a changed agent is asked again.
func (d *Daemon) forgetTokens(ids []kin.AgentID) {
	d.id.mu.Lock()
	for _, id := range ids {
		delete(d.id.tokens, id)
	}
	d.id.mu.Unlock()
}

// topLevel reports whether an agent is a top-level AAuth agent: it has a key
// and its parent has none (or it has no parent).
func (d *Daemon) topLevel(ctx context.Context, a *kin.Agent) (bool, error) {
	if a.Parent == 0 {
		return true, nil
	}
	_, ok, err := d.localOf(ctx, a.Parent)
	return !ok, err
}

// Grant records a top-level agent's grant (operator only).
func (d *Daemon) Grant(ctx context.Context, req kin.GrantRequest) (*kin.Grant, error) {
	if err := d.operatorOnly(ctx, "grant"); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	req.Resource = strings.TrimSuffix(req.Resource, "/")
	now := d.now()
	if !req.Until.IsZero() && !req.Until.After(now) {
		return nil, kin.Errorf(kin.ECodeInvalid, "--until %s is not in the future", req.Until.Format(time.RFC3339))
	}
	a, err := d.store.AgentGetByID(ctx, req.Agent)
	if err != nil {
		return nil, d.storeError(err)
	}
	if top, err := d.topLevel(ctx, a); err != nil {
		return nil, d.storeError(err)
	} else if !top {
		return nil, kin.Errorf(kin.ECodeInvalid, "agent %d (%s) is a sub-agent: grants are kept for top-level agents only (seed 004), and its parent's grant covers it", a.ID, a.Name)
	}
	if !a.Live() {
		return nil, kin.Errorf(kin.ECodeInvalidTransition, "agent %d is %s: it cannot hold a grant", a.ID, a.Status)
	}
	g := kin.Grant{Agent: a.ID, Resource: req.Resource, Scope: strings.Join(strings.Fields(req.Scope), " "), Until: req.Until.UTC(), CreatedAt: now}
	err = d.store.Update(ctx, func(tx store.Tx) error {
		g.Revoked = 0
		old, err := tx.GrantList(ctx, a.ID)
		if err != nil {
			return err
		}
		for _, o := range old {
			narrowed := !kin.ScopeCovers(g.Scope, o.Scope) || (!g.Until.IsZero() && (o.Until.IsZero() || g.Until.Before(o.Until)))
			if o.Resource == g.Resource && narrowed {
				n, err := d.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Parent: a.ID, Resource: g.Resource}, "grant narrowed")
				if err != nil {
					return err
				}
				g.Revoked = n
			}
		}
		if err := tx.GrantSet(ctx, store.GrantRow{Agent: g.Agent, Resource: g.Resource, Scope: g.Scope, Until: g.Until, CreatedAt: now}); err != nil {
			return err
		}
		return appendEvent(ctx, tx, now, kin.EventGrant, a.ID, a.Parent, grantData{Agent: a.ID, Resource: g.Resource, Scope: g.Scope, Until: g.Until, Action: "granted"})
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	return &g, nil
}

// Grants lists grants.
func (d *Daemon) Grants(ctx context.Context, agent kin.AgentID) ([]kin.Grant, error) {
	if err := d.operatorOnly(ctx, "list grants"); err != nil {
		return nil, err
	}
	rows, err := d.store.GrantList(ctx, agent)
	if err != nil {
		return nil, d.storeError(err)
	}
	out := make([]kin.Grant, 0, len(rows))
	for _, r := range rows {
		out = append(out, kin.Grant{Agent: r.Agent, Resource: r.Resource, Scope: r.Scope, Until: r.Until, CreatedAt: r.CreatedAt})
	}
	return out, nil
}

// Ungrant removes a grant and revokes what was issued under it.
func (d *Daemon) Ungrant(ctx context.Context, req kin.UngrantRequest) (*kin.Grant, error) {
	if err := d.operatorOnly(ctx, "remove a grant"); err != nil {
		return nil, err
	}
	if err := kin.ValidResource(req.Resource); err != nil {
		return nil, err
	}
	req.Resource = strings.TrimSuffix(req.Resource, "/")
	var out *kin.Grant
	now := d.now()
	err := d.store.Update(ctx, func(tx store.Tx) error {
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
		if out.Revoked, err = d.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Parent: req.Agent, Resource: req.Resource}, "grant removed"); err != nil {
			return err
		}
		return appendEvent(ctx, tx, now, kin.EventGrant, req.Agent, 0, grantData{Agent: req.Agent, Resource: req.Resource, Scope: out.Scope, Action: "ungranted", Revoked: out.Revoked})
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	if out == nil {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d has no grant for %s", req.Agent, req.Resource)
	}
	return out, nil
}

// AuthTokens lists issued auth tokens. An agent sees those of its subtree.
func (d *Daemon) AuthTokens(ctx context.Context, f kin.AuthTokenFilter) ([]kin.AuthToken, error) {
	c := callerOf(ctx)
	if !c.operator() {
		if f.Agent == 0 {
			f.Agent = c.agent
		}
		if err := d.authorize(ctx, f.Agent, true); err != nil {
			return nil, err
		}
	}
	now := d.now()
	since := now
	if f.Expired {
		since = time.Time{}
	}
	rows, err := d.store.AuthTokenList(ctx, f.Agent, since)
	if err != nil {
		return nil, d.storeError(err)
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
func (d *Daemon) RotateKeys(ctx context.Context, role string) (*kin.KeyRotation, error) {
	if err := d.operatorOnly(ctx, "rotate keys"); err != nil {
		return nil, err
	}
	var ring *keyring.Ring
	switch role {
	case kin.KeyRoleAgent:
		ring = d.id.ap
	case kin.KeyRolePerson:
		ring = d.id.person
	default:
		return nil, kin.Errorf(kin.ECodeInvalid, "role %q: want %s or %s", role, kin.KeyRoleAgent, kin.KeyRolePerson)
	}
	now := d.now()
	k, err := ring.Rotate(now)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInternal, "%v", err)
	}
	out := &kin.KeyRotation{Role: role, KID: k.KID}
	for _, j := range ring.JWKS().Keys {
		out.Published = append(out.Published, j.KID)
	}
	if role == kin.KeyRoleAgent {
		d.id.mu.Lock()
		clear(d.id.tokens) // new tokens are signed with the new key
		d.id.mu.Unlock()
	}
	err = d.store.Update(ctx, func(tx store.Tx) error {
		return appendEvent(ctx, tx, now, kin.EventKeysRotated, 0, 0, rotatedData{Role: role, KID: k.KID})
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	return out, nil
}

// Auth tokens are kept past their expiry for a day, for kin auth-tokens
// --expired, then pruned.
const (
	authTokenKeep = 24 * time.Hour
	pruneEvery    = 10 * time.Minute
)

// pruneAuthTokens deletes, every pruneEvery, the auth tokens that expired
// more than authTokenKeep ago, so the table holds about a day of issuance.
func (d *Daemon) pruneAuthTokens() {
	defer d.wg.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		select {
		case <-d.closing:
			return
		case <-t.C:
		}
		ctx := context.Background()
		err := d.store.Update(ctx, func(tx store.Tx) error { return tx.AuthTokenPrune(ctx, d.now().Add(-authTokenKeep)) })
		if err != nil {
			d.log.Error("prune expired auth tokens", "err", err)
		}
	}
}

// revokeTx revokes the auth tokens p selects, records one event for each
// (parent, sub-agent) pair, and returns how many it revoked.
func (d *Daemon) revokeTx(ctx context.Context, tx store.Tx, now time.Time, p store.AuthTokenRevokeParams, reason string) (int, error) {
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
		if err := appendEvent(ctx, tx, now, kin.EventTokenRevoked, k.agent, k.parent, revokedData{Agent: k.agent, Parent: k.parent, JTIs: byPair[k], Reason: reason}); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// revokeAgentsTx revokes the auth tokens bound to or obtained by ids and
// forgets their agent tokens: they were suspended, revoked or stopped.
func (d *Daemon) revokeAgentsTx(ctx context.Context, tx store.Tx, now time.Time, ids []kin.AgentID, reason string) error {
	if d.id == nil || len(ids) == 0 {
		return nil
	}
	d.forgetTokens(ids)
	_, err := d.revokeTx(ctx, tx, now, store.AuthTokenRevokeParams{Agents: ids}, reason)
	return err
}

// Event payloads.
type grantData struct {
	Agent    kin.AgentID `json:"agent"`
	Resource string      `json:"resource"`
	Scope    string      `json:"scope"`
	Until    time.Time   `json:"until,omitzero"`
	Action   string      `json:"action"`
	Revoked  int         `json:"revoked,omitempty"`
}

type issuedData struct {
	Parent    kin.AgentID `json:"parent"`
	Agent     kin.AgentID `json:"agent"`
	Resource  string      `json:"resource"`
	Scope     string      `json:"scope"`
	JTI       string      `json:"jti"`
	ExpiresAt time.Time   `json:"expires_at"`
}

type refusedData struct {
	Parent kin.AgentID `json:"parent,omitempty"`
	Agent  kin.AgentID `json:"agent,omitempty"`
	Code   string      `json:"code"`
	Detail string      `json:"detail"`
}

type revokedData struct {
	Agent  kin.AgentID `json:"agent"`
	Parent kin.AgentID `json:"parent"`
	JTIs   []string    `json:"jtis"`
	Reason string      `json:"reason"`
}

type rotatedData struct {
	Role string `json:"role"`
	KID  string `json:"kid"`
}
