package identity

import (
	"crypto/ed25519"
	"strings"
	"time"
)

// Token constants.
const (
	TypAgent = "aa-agent+jwt"
	// DWK is the well-known document name an agent token's dwk names.
	DWK = "aauth-agent.json"
	// MaxLifetime bounds exp - iat of an agent token.
	MaxLifetime = 24 * time.Hour
	// DefaultLifetime is the lifetime kin gives agent tokens by default.
	DefaultLifetime = time.Hour
	// MaxIATSkew is how far in the future iat may be at verification.
	MaxIATSkew = 60 * time.Second
	subPrefix  = "aauth:"
)

// Confirmation is the cnf claim: the agent's own public key.
type Confirmation struct {
	JWK JWK `json:"jwk"`
}

// Actor is the seed's act claim naming the parent agent.
type Actor struct {
	Agent string `json:"agent"`
}

// AgentClaims is an agent token's claim set. Fields are declared in
// lexicographic order of their JSON names, so the payload has sorted keys.
// Unknown claims are ignored when verifying.
type AgentClaims struct {
	Act *Actor       `json:"act,omitempty"` // sub-agents, seed form
	Cnf Confirmation `json:"cnf"`
	DWK string       `json:"dwk"`
	Exp int64        `json:"exp"`
	IAT int64        `json:"iat"`
	Iss string       `json:"iss"`
	JTI string       `json:"jti"`
	// ParentAgent is the parent's sub (current draft); empty for top-level.
	ParentAgent string `json:"parent_agent,omitempty"`
	PS          string `json:"ps,omitempty"`
	Sub         string `json:"sub"`
}

// agentMembers are AgentClaims' JSON names, for decodeStrict.
var agentMembers = []string{"act", "cnf", "dwk", "exp", "iat", "iss", "jti", "parent_agent", "ps", "sub"}

func (c *AgentClaims) times() (iat, exp int64) { return c.IAT, c.Exp }

// SplitSub splits "aauth:<local>@<domain>" at its last '@'.
func SplitSub(sub string) (local, domain string, err error) {
	rest, ok := strings.CutPrefix(sub, subPrefix)
	at := strings.LastIndexByte(rest, '@')
	if !ok || at <= 0 || at == len(rest)-1 {
		return "", "", errf(CodeInvalidJWT, "sub is not aauth:<local>@<domain>")
	}
	return rest[:at], rest[at+1:], nil
}

// check validates the claims common to every agent token. Failures are
// CodeInvalidJWT, or CodeInvalidKey for cnf.jwk.
func (c *AgentClaims) check() error {
	switch {
	case c.Iss == "":
		return errf(CodeInvalidJWT, "iss missing")
	case c.DWK != DWK:
		return errf(CodeInvalidJWT, "dwk must be "+DWK)
	case c.JTI == "":
		return errf(CodeInvalidJWT, "jti missing")
	case c.IAT <= 0:
		return errf(CodeInvalidJWT, "iat missing")
	case c.Exp <= c.IAT:
		return errf(CodeInvalidJWT, "exp not after iat")
	case c.Exp-c.IAT > int64(MaxLifetime/time.Second):
		return errf(CodeInvalidJWT, "lifetime over 24 h")
	}
	if _, err := c.Cnf.JWK.PublicKey(); err != nil {
		return err
	}
	local, domain, err := SplitSub(c.Sub)
	if err != nil {
		return err
	}
	if c.ParentAgent == "" {
		if c.Act != nil {
			return errf(CodeInvalidJWT, "act without parent_agent")
		}
		if strings.Contains(local, "+") {
			return errf(CodeInvalidJWT, "top-level local part contains '+'")
		}
		return nil
	}
	if c.Act != nil && c.Act.Agent != c.ParentAgent {
		return errf(CodeInvalidJWT, "act.agent differs from parent_agent")
	}
	plocal, pdomain, err := SplitSub(c.ParentAgent)
	if err != nil {
		return errf(CodeInvalidJWT, "parent_agent is not aauth:<local>@<domain>")
	}
	disc, ok := strings.CutPrefix(local, plocal+"+")
	if !ok || disc == "" || strings.Contains(disc, "+") || domain != pdomain {
		return errf(CodeInvalidJWT, "sub is not <parent-local>+<discriminator>@<parent-domain>")
	}
	return nil
}

// IssueAgentToken signs a top-level agent token. It refuses claims with
// parent_agent or act (use IssueSubAgentToken), a '+' in the local part,
// exp <= iat, and a lifetime over 24 hours.
func IssueAgentToken(key Key, c AgentClaims) (string, error) {
	if c.ParentAgent != "" || c.Act != nil {
		return "", errf(CodeInvalidJWT, "sub-agent claims: use IssueSubAgentToken")
	}
	if err := c.check(); err != nil {
		return "", err
	}
	return sign(key, TypAgent, &c)
}

// SubAgentOption adjusts IssueSubAgentToken.
type SubAgentOption func(*subOpts)

type subOpts struct {
	singleLevel bool
	noAct       bool
}

// SingleLevel refuses a sub-agent whose parent is itself a sub-agent (the
// aauth profile, seed 004 section 3).
func SingleLevel() SubAgentOption { return func(o *subOpts) { o.singleLevel = true } }

// DraftClaimsOnly omits the seed's act claim and names the parent with
// parent_agent only (the current draft's form).
func DraftClaimsOnly() SubAgentOption { return func(o *subOpts) { o.noAct = true } }

// IssueSubAgentToken signs a sub-agent token for c under parent (the
// parent's verified or issued claims, taken from the registry by the caller).
// It fills parent_agent, act (unless DraftClaimsOnly) and ps from the parent
// when empty, and refuses: a different iss or ps, parent_agent or act naming
// anyone but the parent, a sub that is not <parent-local>+<discriminator> at
// the parent's domain, an exp after the parent's, and, with SingleLevel, a
// parent that is itself a sub-agent.
func IssueSubAgentToken(key Key, parent AgentClaims, c AgentClaims, opts ...SubAgentOption) (string, error) {
	var o subOpts
	for _, f := range opts {
		f(&o)
	}
	if o.singleLevel && parent.ParentAgent != "" {
		return "", errf(CodeInvalidJWT, "single-level profile: parent is a sub-agent")
	}
	if err := parent.check(); err != nil {
		return "", errf(CodeInvalidJWT, "parent claims: "+err.(*Error).Detail)
	}
	if c.ParentAgent == "" {
		c.ParentAgent = parent.Sub
	}
	if c.PS == "" {
		c.PS = parent.PS
	}
	if c.Act == nil && !o.noAct {
		c.Act = &Actor{Agent: parent.Sub}
	}
	switch {
	case c.ParentAgent != parent.Sub:
		return "", errf(CodeInvalidJWT, "parent_agent does not name the parent")
	case c.Iss != parent.Iss:
		return "", errf(CodeInvalidJWT, "iss differs from the parent's")
	case c.PS != parent.PS:
		return "", errf(CodeInvalidJWT, "ps differs from the parent's")
	case c.Exp > parent.Exp:
		return "", errf(CodeInvalidJWT, "exp after the parent token's exp")
	}
	if err := c.check(); err != nil {
		return "", err
	}
	return sign(key, TypAgent, &c)
}

// VerifyAgentToken parses and verifies an agent token at now. keys resolves
// the header's kid to the agent provider's public key. Errors are *Error:
// CodeInvalidKey when the kid is unknown or cnf.jwk is unusable,
// CodeExpiredJWT when now is at or after exp, CodeInvalidJWT otherwise
// (malformed, wrong alg or typ, bad signature, iat in the future, claim
// rules). It does not check a sub-agent's parent (the caller holds the
// parent's claims) nor revocation.
func VerifyAgentToken(token string, now time.Time, keys func(kid string) (ed25519.PublicKey, error)) (*AgentClaims, error) {
	var c AgentClaims
	if err := verify(token, now, keys, TypAgent, &c, agentMembers...); err != nil {
		return nil, err
	}
	return &c, nil
}
