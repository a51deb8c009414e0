package personserver

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/aauth"
	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The public AAuth endpoints, served on the HTTP address without the
// operator token: the callers prove who they are with HTTP signatures.
const (
	PathAgentMetadata  = "/.well-known/" + identity.DWK
	PathAgentJWKS      = "/.well-known/jwks.json"
	PathPersonMetadata = "/.well-known/" + identity.DWKPerson
	PathPersonJWKS     = "/.well-known/aauth-person-jwks.json"
	PathAuthToken      = "/auth-token"
	PathTokenStatus    = "/aauth/token-status"
	maxAuthTokenBody   = 256 << 10
)

// Handler serves kin's AAuth endpoints: the agent provider's and the
// person server's metadata and keys, the auth-token endpoint and the token
// status endpoint. Anything else goes to next.
func (srv *Server) Handler(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathAgentMetadata, func(w http.ResponseWriter, r *http.Request) {
		srv.writeMetadata(w, aauth.Metadata{JWKSURI: srv.id.issuer + PathAgentJWKS})
	})
	mux.HandleFunc("GET "+PathAgentJWKS, func(w http.ResponseWriter, r *http.Request) {
		writePublicJSON(w, http.StatusOK, srv.JWKS(kin.KeyRoleAgent))
	})
	mux.HandleFunc("GET "+PathPersonMetadata, func(w http.ResponseWriter, r *http.Request) {
		srv.writeMetadata(w, aauth.Metadata{JWKSURI: srv.id.issuer + PathPersonJWKS,
			AuthTokenEndpoint: srv.id.issuer + PathAuthToken, TokenStatusEndpoint: srv.id.issuer + PathTokenStatus})
	})
	mux.HandleFunc("GET "+PathPersonJWKS, func(w http.ResponseWriter, r *http.Request) {
		writePublicJSON(w, http.StatusOK, srv.JWKS(kin.KeyRolePerson))
	})
	mux.HandleFunc("POST "+PathAuthToken, srv.serveAuthToken)
	mux.HandleFunc("GET "+PathTokenStatus, srv.serveTokenStatus)
	mux.Handle("/", next)
	return mux
}

func (srv *Server) writeMetadata(w http.ResponseWriter, m aauth.Metadata) {
	if srv.id.issuer == "" {
		aauth.WriteProblem(w, &aauth.Problem{Status: http.StatusServiceUnavailable, Code: "server_error", Detail: "kin has no issuer configured"})
		return
	}
	m.Issuer = srv.id.issuer
	w.Header().Set("Cache-Control", "max-age=300")
	writePublicJSON(w, http.StatusOK, m)
}

func writePublicJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// verifiedAgent is an agent token kin verified and the registry entry
// behind it.
type verifiedAgent struct {
	claims *identity.AgentClaims
	agent  *kin.Agent
	key    store.AgentKeyRow
}

// verifyAgentToken checks an agent token against kin's keys and registry:
// kin's issuer, a key some agent holds, the identifier kin gave that agent,
// and the agent live and active. In a fleet, kin's keys are every host's
// and its registry the store, so a token any host issued verifies here and
// an agent revoked or ended on any host is refused; the agent's record is
// cached while no event says it changed (Followed). Errors are
// *httpsig.Error.
func (srv *Server) verifyAgentToken(ctx context.Context, token string, now time.Time) (*verifiedAgent, error) {
	c := srv.id.verifiedClaims(token, now)
	if c == nil {
		var err error
		keys := func(kid string) (ed25519.PublicKey, error) { return srv.publicKey(ctx, kin.KeyRoleAgent, kid) }
		if c, err = identity.VerifyAgentToken(token, now, keys); err != nil {
			var ie *identity.Error
			if errors.As(err, &ie) {
				return nil, &httpsig.Error{Code: httpsig.Code(ie.Code), Detail: ie.Detail}
			}
			return nil, &httpsig.Error{Code: httpsig.CodeInvalidJWT, Detail: err.Error()}
		}
		srv.id.rememberVerified(token, c)
	}
	if c.Iss != srv.id.issuer {
		return nil, &httpsig.Error{Code: httpsig.CodeIssuerMismatch, Detail: "iss " + c.Iss + " is not this agent provider (" + srv.id.issuer + ")"}
	}
	jkt := identity.Thumbprint(c.Cnf.JWK)
	row, ok := srv.id.agentKey(jkt)
	if !ok {
		var err error
		if row, err = srv.st.AgentKeyByJKT(ctx, jkt); err != nil {
			return nil, &httpsig.Error{Code: httpsig.CodeInvalidKey, Detail: "no agent holds the token's key"}
		}
		srv.id.rememberKey(row)
	}
	if c.Sub != srv.sub(row.Local) {
		return nil, &httpsig.Error{Code: httpsig.CodeInvalidJWT, Detail: "sub " + c.Sub + " is not the identifier of the key's agent"}
	}
	a, err := srv.activeRecord(ctx, row.Agent, now)
	if err != nil {
		return nil, err
	}
	// A sub-agent's token derives from its parent's: it is good while
	// every ancestor it derives from is (revocation follows the tree).
	for p := a.Parent; c.ParentAgent != "" && p != 0; {
		if _, ok, err := srv.localOf(ctx, p); err != nil {
			return nil, &httpsig.Error{Code: httpsig.CodeInvalidKey, Detail: "the store failed"}
		} else if !ok {
			break // a top-level AAuth agent's parent: outside the chain
		}
		pa, err := srv.activeRecord(ctx, p, now)
		if err != nil {
			var se *httpsig.Error
			if errors.As(err, &se) {
				se.Detail = "agent " + a.ID.String() + "'s ancestor " + se.Detail
			}
			return nil, err
		}
		p = pa.Parent
	}
	return &verifiedAgent{claims: c, agent: a, key: row}, nil
}

// activeRecord returns agent id's record when it is live and active (the
// store's, or what was cached of it while no event said it changed), else
// an *httpsig.Error: revoked_jwt naming its status.
func (srv *Server) activeRecord(ctx context.Context, id kin.AgentID, now time.Time) (*kin.Agent, error) {
	a, gen := srv.id.activeAgent(id, now)
	if a != nil {
		return a, nil
	}
	a, err := srv.st.AgentGetByID(ctx, id)
	if err != nil {
		return nil, &httpsig.Error{Code: httpsig.CodeInvalidKey, Detail: "the key's agent is not in the registry"}
	}
	if !a.Live() || a.Status != kin.StatusActive {
		return nil, &httpsig.Error{Code: httpsig.CodeRevokedJWT, Detail: "agent " + a.ID.String() + " is " + string(a.Status) + " (" + string(a.State) + ")"}
	}
	srv.id.rememberActive(a, now, gen)
	cp := *a
	return &cp, nil
}

// refusal is an auth-token request kin turned down.
type refusal struct {
	status     int
	code       string
	detail     string
	sig        *httpsig.Error // answered as 401 with Signature-Error
	retryAfter time.Duration  // answered as 503 with Retry-After
	retry      float64        // rate_limited: seconds until the next is allowed
}

func (r *refusal) write(w http.ResponseWriter) {
	switch {
	case r.sig != nil:
		aauth.WriteSignatureError(w, r.sig)
	case r.retryAfter > 0:
		aauth.WriteUnavailable(w, r.detail, r.retryAfter)
	default:
		if r.retry > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(r.retry)), 10))
		}
		aauth.WriteProblem(w, &aauth.Problem{Status: r.status, Code: r.code, Detail: r.detail})
	}
}

// signatureRefusal is the refusal of a request whose signature was not
// accepted: 401 with Signature-Error, or 503 when the replay cache is full.
func signatureRefusal(err error) *refusal {
	var full *httpsig.FullError
	if errors.As(err, &full) {
		return &refusal{code: aauth.CodeUnavailable, retryAfter: full.RetryAfter,
			detail: "kin accepted too many signed requests in the last minute to remember another; retry later"}
	}
	var se *httpsig.Error
	if !errors.As(err, &se) {
		se = &httpsig.Error{Code: httpsig.CodeInvalidSignature, Detail: err.Error()}
	}
	return &refusal{sig: se}
}

// WriteSignatureRefusal answers a request whose signature SignedAgent
// did not accept.
func WriteSignatureRefusal(w http.ResponseWriter, err error) { signatureRefusal(err).write(w) }

// refuse is a refusal whose detail, which may quote the request, is
// bounded: it is answered, and logged or recorded.
func refuse(status int, code, detail string) *refusal {
	return &refusal{status: status, code: code, detail: httpsig.BoundDetail(detail)}
}

// what is the refusal's code and detail, as logged or recorded.
func (r *refusal) what() (code, detail string) {
	if r.sig != nil {
		return string(r.sig.Code), httpsig.BoundDetail(r.sig.Detail)
	}
	return r.code, httpsig.BoundDetail(r.detail)
}

// tokenError names a failed token parameter's problem by the draft's
// pattern <invalid|expired|revoked>_<parameter>_token.
func tokenError(param string, err error) *refusal {
	kind, detail := "invalid", err.Error()
	var se *httpsig.Error
	var ie *identity.Error
	switch {
	case errors.As(err, &se):
		detail = string(se.Code) + ": " + se.Detail
		switch se.Code {
		case httpsig.CodeExpiredJWT:
			kind = "expired"
		case httpsig.CodeRevokedJWT:
			kind = "revoked"
		}
	case errors.As(err, &ie):
		detail = string(ie.Code) + ": " + ie.Detail
		if ie.Code == identity.CodeExpiredJWT {
			kind = "expired"
		}
	}
	return refuse(http.StatusBadRequest, kind+"_"+param+"_token", detail)
}

// serveAuthToken is seed 004 §2's parent-mediated authorization: a
// top-level agent (the parent) obtains an auth token bound to its
// sub-agent's key. Checked in order: the HTTP signature against the
// parent's key, the sub-agent token and its parent claim, the resource
// token's binding to the sub-agent's key, the parent's grant.
func (srv *Server) serveAuthToken(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := srv.now()
	if srv.id.issuer == "" {
		refuse(http.StatusServiceUnavailable, "server_error", "kin has no issuer configured").write(w)
		return
	}
	var parent, bound *verifiedAgent
	// Checking the signature reads the whole body for its digest: bound it
	// first by what this endpoint accepts (one byte more, to tell).
	r.Body = http.MaxBytesReader(w, r.Body, maxAuthTokenBody+1)
	tok, ref := srv.authToken(ctx, r, now, &parent, &bound)
	if ref != nil {
		var pid, aid kin.AgentID
		if parent != nil {
			pid = parent.agent.ID
		}
		if bound != nil && bound != parent {
			aid = bound.agent.ID
		}
		code, detail := ref.what()
		// A refusal is an event once it names an agent: a request whose
		// signer is unknown names nobody, and must not make kin write to
		// its store; nor one past its signer's quota. Those are logged,
		// bounded (refusalLog).
		if pid != 0 && ref.code != string(kin.ECodeRateLimited) {
			srv.recordRefusal(pid, aid, code, detail)
		} else {
			srv.refusals.write("auth-token refused", code, detail)
		}
		ref.write(w)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writePublicJSON(w, http.StatusOK, tok)
}

func (srv *Server) recordRefusal(parent, agent kin.AgentID, code, detail string) {
	err := store.UpdateAfter(context.Background(), srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		return store.AppendEvent(context.Background(), tx, srv.now(), kin.EventTokenRefused, agent, parent, kin.TokenRefusedData{Parent: parent, Agent: agent, Code: code, Detail: detail})
	})
	if err != nil {
		srv.log.Error("record auth-token refusal", "err", err)
		return
	}
}

func (srv *Server) authToken(ctx context.Context, r *http.Request, now time.Time, parentOut, boundOut **verifiedAgent) (*aauth.AuthTokenResponse, *refusal) {
	// 1. The HTTP signature, made for this host, against the key of the
	// agent token it presents, accepted once.
	if err := srv.signedForAnotherHost(r); err != nil {
		*parentOut = nil // whoever sent it need not be its signer
		return nil, signatureRefusal(err)
	}
	_, err := srv.replays.Verify(r, now, func(sk httpsig.SignatureKey) (ed25519.PublicKey, error) {
		v, err := srv.verifyAgentToken(ctx, sk.JWT, now)
		if err != nil {
			return nil, err
		}
		*parentOut = v
		return v.claims.Cnf.JWK.PublicKey()
	})
	if err != nil {
		var full *httpsig.FullError
		if errors.As(err, &full) || errors.Is(err, &httpsig.Error{Code: httpsig.CodeReplayedRequest}) {
			// Whoever sent a replay, or a request kin had no room to
			// remember, need not be its signer: it names nobody, and
			// must not make kin write.
			*parentOut = nil
		}
		return nil, signatureRefusal(err)
	}
	parent := *parentOut
	// Every answer from here on is written (issued or refused): the
	// signer's reports quota first.
	if err := srv.cfg.Quota.AllowAgent(parent.agent.ID, quota.Reports); err != nil {
		var ke *kin.Error
		errors.As(err, &ke)
		return nil, &refusal{status: http.StatusTooManyRequests, code: string(kin.ECodeRateLimited), detail: ke.Message, retry: ke.RetryAfter}
	}
	if parent.claims.ParentAgent != "" {
		return nil, refuse(http.StatusForbidden, "access_denied", "the request is signed by a sub-agent ("+parent.claims.Sub+"): a sub-agent never calls the person server; its parent obtains its auth tokens (seed 004)")
	}
	if top, err := srv.topLevel(ctx, parent.agent); err != nil || !top {
		return nil, refuse(http.StatusForbidden, "access_denied", "agent "+parent.agent.ID.String()+" is not a top-level agent")
	}

	var body aauth.AuthTokenRequest
	data, err := io.ReadAll(io.LimitReader(r.Body, maxAuthTokenBody+1))
	if err != nil || len(data) > maxAuthTokenBody {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "the body is unreadable or larger than 256 KiB")
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "the body is not a JSON object: "+err.Error())
	}
	if body.ResourceToken == "" {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "resource_token is missing")
	}
	subTok := body.SubagentToken
	if body.ActorToken != "" {
		if subTok != "" && subTok != body.ActorToken {
			return nil, refuse(http.StatusBadRequest, "invalid_request", "subagent_token and actor_token (its seed 004 name) differ")
		}
		subTok = body.ActorToken
	}

	// 2. The sub-agent token: kin's signature, unexpired, the parent's
	// issuer, and a parent claim naming the signer (the registry agrees).
	bound := parent
	if subTok != "" {
		if _, _, iss, err := identity.Peek(subTok); err != nil {
			return nil, tokenError("subagent", err)
		} else if iss != parent.claims.Iss {
			return nil, refuse(http.StatusBadRequest, "invalid_subagent_token", "its iss "+iss+" differs from the parent's "+parent.claims.Iss)
		}
		sa, err := srv.verifyAgentToken(ctx, subTok, now)
		if err != nil {
			return nil, tokenError("subagent", err)
		}
		*boundOut = sa
		if ref := srv.checkLineage(ctx, parent, sa); ref != nil {
			return nil, ref
		}
		bound = sa
	}

	// The grant is looked up before anything is fetched from the resource:
	// kin contacts no resource that no grant of the parent names.
	_, _, resIss, err := identity.Peek(body.ResourceToken)
	if err != nil {
		return nil, tokenError("resource", err)
	}
	grant, ref := srv.grantFor(ctx, parent.agent.ID, resIss, now)
	if ref != nil {
		return nil, ref
	}

	// 3. The resource token: the resource's signature, addressed to kin,
	// bound to the sub-agent's key.
	rc, err := identity.VerifyResourceToken(body.ResourceToken, now, srv.disc.Keys(ctx, resIss, identity.DWKResource))
	if err != nil {
		return nil, tokenError("resource", err)
	}
	if rc.Aud != srv.id.issuer {
		return nil, refuse(http.StatusBadRequest, "invalid_resource_token", "its aud "+rc.Aud+" is not this person server ("+srv.id.issuer+")")
	}
	if rc.AgentJKT != bound.key.JKT {
		return nil, refuse(http.StatusBadRequest, "invalid_resource_token", "it is bound to key "+rc.AgentJKT+", not to "+bound.claims.Sub+"'s key "+bound.key.JKT)
	}
	if body.PresentedToken != "" {
		if ref := srv.checkPresented(ctx, body.PresentedToken, rc, bound, now); ref != nil {
			return nil, ref
		}
	}

	// 4. The parent's grant covers the scope.
	if !kin.ScopeCovers(grant.Scope, rc.Scope) {
		return nil, refuse(http.StatusForbidden, "access_denied", "agent "+parent.agent.ID.String()+"'s grant for "+grant.Resource+" is scope \""+grant.Scope+"\"; the resource asks for \""+rc.Scope+"\"")
	}

	exp := min(now.Add(identity.MaxAuthLifetime).Unix(), parent.claims.Exp, bound.claims.Exp)
	if !grant.Until.IsZero() {
		exp = min(exp, grant.Until.Unix())
	}
	if exp <= now.Unix() {
		return nil, refuse(http.StatusForbidden, "access_denied", "the tokens it would be derived from expire now")
	}
	sub := rc.Sub
	if sub == "" {
		sub = parent.agent.Responsible
	}
	if sub == "" {
		sub = kin.Operator
	}
	c := identity.AuthClaims{
		Agent: bound.claims.Sub, Aud: rc.Iss, Cnf: identity.Confirmation{JWK: bound.claims.Cnf.JWK},
		DWK: identity.DWKPerson, Exp: exp, IAT: now.Unix(), Iss: srv.id.issuer, JTI: newJTI(),
		PS: srv.id.issuer, Scope: rc.Scope, Sub: sub,
	}
	if bound != parent {
		c.Act = &identity.Actor{Agent: parent.claims.Sub}
	}
	tok, err := identity.IssueAuthToken(srv.id.person.Current(), c)
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, "server_error", err.Error())
	}
	// Recorded with the registry read again inside the write: a parent
	// suspended or a grant removed meanwhile fails this issuance.
	var late *refusal
	err = store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		late = nil
		for _, v := range []*verifiedAgent{parent, bound} {
			a, err := tx.AgentGetByID(ctx, v.agent.ID)
			if err != nil {
				return err
			}
			if !a.Live() || a.Status != kin.StatusActive {
				late = &refusal{sig: &httpsig.Error{Code: httpsig.CodeRevokedJWT, Detail: "agent " + a.ID.String() + " is " + string(a.Status)}}
				return nil
			}
		}
		gs, err := tx.GrantList(ctx, parent.agent.ID)
		if err != nil {
			return err
		}
		ok := false
		for _, g := range gs {
			ok = ok || (g.Resource == grant.Resource && kin.ScopeCovers(g.Scope, rc.Scope))
		}
		if !ok {
			late = refuse(http.StatusForbidden, "access_denied", "the grant was removed")
			return nil
		}
		row := store.AuthTokenRow{JTI: c.JTI, Agent: bound.agent.ID, Parent: parent.agent.ID, Resource: rc.Iss, Scope: rc.Scope,
			IssuedAt: now, ExpiresAt: time.Unix(exp, 0).UTC()}
		if err := tx.AuthTokenInsert(ctx, row); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, now, kin.EventTokenIssued, bound.agent.ID, parent.agent.ID,
			kin.TokenIssuedData{Parent: parent.agent.ID, Agent: bound.agent.ID, Resource: rc.Iss, Scope: rc.Scope, JTI: c.JTI, ExpiresAt: row.ExpiresAt})
	})
	if err != nil {
		return nil, refuse(http.StatusInternalServerError, "server_error", "the store failed")
	}
	if late != nil {
		return nil, late
	}
	return &aauth.AuthTokenResponse{AuthToken: tok, ExpiresIn: exp - now.Unix()}, nil
}

// checkLineage checks that a sub-agent token belongs under the signing
// parent: its parent claim names the signer and the registry has the
// sub-agent as the signer's child. Outside the aauth profile a deeper
// descendant is accepted too, "flattened" under its top-level ancestor:
// its token names its immediate parent, which the registry confirms.
func (srv *Server) checkLineage(ctx context.Context, parent, sa *verifiedAgent) *refusal {
	if sa.claims.ParentAgent == "" {
		return refuse(http.StatusBadRequest, "invalid_subagent_token", sa.claims.Sub+" is not a sub-agent (no parent_agent)")
	}
	if sa.agent.Parent == parent.agent.ID {
		if sa.claims.ParentAgent != parent.claims.Sub {
			return refuse(http.StatusBadRequest, "invalid_subagent_token", "its parent_agent "+sa.claims.ParentAgent+" does not name the signer "+parent.claims.Sub)
		}
		return nil
	}
	if srv.singleLevel() || !srv.lin.IsDescendant(sa.agent.ID, parent.agent.ID) {
		return refuse(http.StatusBadRequest, "invalid_subagent_token", "its parent_agent "+sa.claims.ParentAgent+" does not name the signer "+parent.claims.Sub)
	}
	if l, ok, err := srv.localOf(ctx, sa.agent.Parent); err != nil || !ok || srv.sub(l) != sa.claims.ParentAgent {
		return refuse(http.StatusBadRequest, "invalid_subagent_token", "its parent_agent "+sa.claims.ParentAgent+" is not its parent in the registry")
	}
	return nil
}

// grantFor returns the parent's grant for a resource in force at now.
func (srv *Server) grantFor(ctx context.Context, parent kin.AgentID, resource string, now time.Time) (store.GrantRow, *refusal) {
	gs, err := srv.st.GrantList(ctx, parent)
	if err != nil {
		return store.GrantRow{}, refuse(http.StatusInternalServerError, "server_error", "the store failed")
	}
	for _, g := range gs {
		if g.Resource != strings.TrimSuffix(resource, "/") {
			continue
		}
		if !g.Until.IsZero() && !now.Before(g.Until) {
			return store.GrantRow{}, refuse(http.StatusForbidden, "access_denied", "agent "+parent.String()+"'s grant for "+g.Resource+" ended at "+g.Until.Format(time.RFC3339))
		}
		return g, nil
	}
	return store.GrantRow{}, refuse(http.StatusForbidden, "access_denied", "agent "+parent.String()+" has no grant for "+resource+" (kin grant "+parent.String()+" --resource "+resource+" --scope ...)")
}

// checkPresented checks the draft's presented_token: the token the
// sub-agent showed the resource, whose jti the resource token names. kin
// verifies it when it is one of its own agent tokens.
func (srv *Server) checkPresented(ctx context.Context, pt string, rc *identity.ResourceClaims, bound *verifiedAgent, now time.Time) *refusal {
	typ, _, _, err := identity.Peek(pt)
	if err != nil {
		return tokenError("presented", err)
	}
	if typ != identity.TypAgent {
		return refuse(http.StatusBadRequest, "invalid_presented_token", "kin checks presented agent tokens only, got "+typ)
	}
	v, err := srv.verifyAgentToken(ctx, pt, now)
	if err != nil {
		return tokenError("presented", err)
	}
	if v.key.JKT != bound.key.JKT {
		return refuse(http.StatusBadRequest, "invalid_presented_token", "it belongs to another agent than the one the resource token is bound to")
	}
	if rc.PresentedJTI != "" && rc.PresentedJTI != v.claims.JTI {
		return refuse(http.StatusBadRequest, "invalid_presented_token", "its jti is not the resource token's presented_jti")
	}
	return nil
}

// serveTokenStatus answers whether an auth token kin issued is still good:
// not revoked, not expired, its agents live and active, its grant in force.
func (srv *Server) serveTokenStatus(w http.ResponseWriter, r *http.Request) {
	jti := r.URL.Query().Get("jti")
	w.Header().Set("Cache-Control", "no-store")
	if jti == "" || len(jti) > 128 {
		aauth.WriteProblem(w, &aauth.Problem{Status: http.StatusBadRequest, Code: "invalid_request", Detail: "give ?jti= (at most 128 bytes)"})
		return
	}
	writePublicJSON(w, http.StatusOK, srv.tokenStatus(r.Context(), jti))
}

func (srv *Server) tokenStatus(ctx context.Context, jti string) aauth.TokenStatus {
	st := aauth.TokenStatus{JTI: jti}
	now := srv.now()
	row, err := srv.st.AuthTokenGet(ctx, jti)
	switch {
	case errors.Is(err, store.ErrNotFound):
		st.Reason = "kin issued no token with this jti, or it expired and was pruned"
		return st
	case err != nil:
		st.Reason = "the store failed"
		return st
	case !row.RevokedAt.IsZero():
		st.Reason = "revoked: " + row.RevokedReason
		return st
	case !now.Before(row.ExpiresAt):
		st.Reason = "expired"
		return st
	}
	for _, id := range []kin.AgentID{row.Agent, row.Parent} {
		a, err := srv.st.AgentGetByID(ctx, id)
		if err != nil || !a.Live() || a.Status != kin.StatusActive {
			st.Reason = "agent " + id.String() + " is no longer active"
			return st
		}
	}
	if _, ref := srv.grantFor(ctx, row.Parent, row.Resource, now); ref != nil {
		st.Reason = ref.detail
		return st
	}
	st.Active = true
	return st
}

// SignedAgent is the agent that signed r: the signature, made for this
// host (not another of the fleet: signedForAnotherHost), checked against
// the key its agent token names, the token against kin's keys and
// registry (the agent live and active), and accepted once (a signature
// already accepted is refused with httpsig.CodeReplayedRequest). Errors
// are *httpsig.Error, or *httpsig.FullError when kin has no room to
// remember another signature.
func (srv *Server) SignedAgent(r *http.Request) (*kin.Agent, error) {
	now := srv.now()
	if err := srv.signedForAnotherHost(r); err != nil {
		return nil, err
	}
	var agent *kin.Agent
	_, err := srv.replays.Verify(r, now, func(sk httpsig.SignatureKey) (ed25519.PublicKey, error) {
		v, err := srv.verifyAgentToken(r.Context(), sk.JWT, now)
		if err != nil {
			return nil, err
		}
		agent = v.agent
		return v.claims.Cnf.JWK.PublicKey()
	})
	if err != nil {
		return nil, err
	}
	return agent, nil
}
