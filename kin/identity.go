package kin

import (
	"strings"
	"time"
)

// Identity events (seed 004): every issuance, refusal and revocation names
// the parent and the sub-agent, so that an operator can attribute a
// sub-agent's activity to the agent that spawned it.
const (
	EventGrant        = "aauth.grant"         // agent, resource, scope, until, action (granted, ungranted)
	EventTokenIssued  = "aauth.token.issued"  // parent, agent, resource, scope, jti, expires_at
	EventTokenRefused = "aauth.token.refused" // parent, agent (0 when unknown), code, detail
	EventTokenRevoked = "aauth.token.revoked" // agent, parent, jtis, reason
	EventKeysRotated  = "aauth.keys.rotated"  // role, kid
	MaxGrantResource  = 2048
	MaxGrantScope     = 2048
	KeyRoleAgent      = "agent-provider"
	KeyRolePerson     = "person-server"
)

// AgentToken is an agent's current AAuth agent token (aa-agent+jwt), with
// what a caller needs to use it. The private key never leaves the agent's
// session: KeyPath says where it is.
type AgentToken struct {
	Token     string    `json:"token"`
	Sub       string    `json:"sub"`
	Issuer    string    `json:"issuer"`
	ExpiresAt time.Time `json:"expires_at"`
	KeyPath   string    `json:"key_path,omitempty"`
	// ParentAgent is the parent's identifier when the agent is a
	// sub-agent.
	ParentAgent string `json:"parent_agent,omitempty"`
}

// GrantRequest lets a top-level agent obtain auth tokens for its sub-agents
// (and itself) for Resource's Scope (space-separated scopes) until Until
// (zero: no end). Granting again replaces the grant.
type GrantRequest struct {
	Agent    AgentID   `json:"agent"`
	Resource string    `json:"resource"`
	Scope    string    `json:"scope"`
	Until    time.Time `json:"until,omitzero"`
}

// Grant is a grant in force.
type Grant struct {
	Agent     AgentID   `json:"agent"`
	Resource  string    `json:"resource"`
	Scope     string    `json:"scope"`
	Until     time.Time `json:"until,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	// Revoked counts the issued auth tokens a change of this grant revoked.
	Revoked int `json:"revoked,omitempty"`
}

// UngrantRequest removes a grant.
type UngrantRequest struct {
	Agent    AgentID `json:"agent"`
	Resource string  `json:"resource"`
}

// AuthTokenFilter selects issued auth tokens: those bound to or obtained by
// Agent (0: all); expired ones only with Expired.
type AuthTokenFilter struct {
	Agent   AgentID `json:"agent,omitempty"`
	Expired bool    `json:"expired,omitempty"`
}

// Auth token states.
const (
	TokenActive  = "active"
	TokenRevoked = "revoked"
	TokenExpired = "expired"
)

// AuthToken is an auth token kin issued as the person server: bound to
// Agent's key, obtained by Parent (the seed's act.agent).
type AuthToken struct {
	JTI           string    `json:"jti"`
	Agent         AgentID   `json:"agent"`
	Parent        AgentID   `json:"parent"`
	Resource      string    `json:"resource"`
	Scope         string    `json:"scope"`
	IssuedAt      time.Time `json:"issued_at"`
	ExpiresAt     time.Time `json:"expires_at"`
	State         string    `json:"state"`
	RevokedAt     time.Time `json:"revoked_at,omitzero"`
	RevokedReason string    `json:"revoked_reason,omitempty"`
}

// KeyRotation reports a rotated signing key.
type KeyRotation struct {
	Role string `json:"role"`
	KID  string `json:"kid"`
	// Published lists every kid the role's JWKS now publishes.
	Published []string `json:"published"`
}

// Validate checks a grant request's fields.
func (r GrantRequest) Validate() error {
	if r.Agent <= 0 {
		return Errorf(ECodeInvalid, "a grant needs an agent")
	}
	if err := ValidResource(r.Resource); err != nil {
		return err
	}
	if _, err := ParseScope(r.Scope); err != nil {
		return err
	}
	if len(r.Scope) == 0 {
		return Errorf(ECodeInvalid, "a grant needs at least one scope (--scope)")
	}
	return nil
}

// ValidResource checks a resource identifier: an http or https URL with a
// host and nothing after it but a path.
func ValidResource(s string) error {
	switch {
	case s == "":
		return Errorf(ECodeInvalid, "resource is empty: give the resource's URL, e.g. https://api.example")
	case len(s) > MaxGrantResource:
		return Errorf(ECodeInvalid, "resource is longer than %d bytes", MaxGrantResource)
	case !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://"):
		return Errorf(ECodeInvalid, "resource %q is not an http(s) URL", s)
	case strings.ContainsAny(s, "?# \t\r\n\"\\"):
		return Errorf(ECodeInvalid, "resource %q may not have a query, a fragment, spaces or quotes", s)
	}
	host, _, _ := strings.Cut(s[strings.Index(s, "://")+3:], "/")
	if host == "" {
		return Errorf(ECodeInvalid, "resource %q has no host", s)
	}
	return nil
}

// ParseScope splits a space-separated scope list; each scope is printable
// ASCII without '"' or '\' (RFC 6749 §3.3).
func ParseScope(s string) ([]string, error) {
	if len(s) > MaxGrantScope {
		return nil, Errorf(ECodeInvalid, "scope is longer than %d bytes", MaxGrantScope)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return nil, Errorf(ECodeInvalid, "scope %q has a character that is not allowed at byte %d", s, i)
		}
	}
	return strings.Fields(s), nil
}

// ScopeCovers reports whether the scopes in have every scope of want.
func ScopeCovers(have, want string) bool {
	h := strings.Fields(have)
	for _, w := range strings.Fields(want) {
		found := false
		for _, x := range h {
			if x == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
