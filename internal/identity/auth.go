package identity

import (
	"crypto/ed25519"
	"time"
)

// Auth, resource and person token constants.
const (
	TypAuth     = "aa-auth+jwt"
	TypResource = "aa-resource+jwt"
	TypPerson   = "aa-person+jwt"
	// DWKPerson is the well-known document an auth token's dwk names.
	DWKPerson = "aauth-person.json"
	// DWKResource is the well-known document a resource token's dwk names.
	DWKResource = "aauth-resource.json"
	// MaxAuthLifetime bounds exp - iat of an auth token.
	MaxAuthLifetime = time.Hour
	// MaxResourceLifetime bounds exp - iat of a resource token.
	MaxResourceLifetime = time.Hour
)

// AuthClaims is an auth token's claim set (typ aa-auth+jwt), issued by a
// person server. Fields are declared in lexicographic order of their JSON
// names, so the payload has sorted keys. Unknown claims are ignored when
// verifying.
type AuthClaims struct {
	Act         *Actor       `json:"act,omitempty"`   // seed 004: the parent agent that obtained it
	Agent       string       `json:"agent,omitempty"` // the agent (aauth:local@domain) the token is for
	Aud         string       `json:"aud"`             // the resource
	Cnf         Confirmation `json:"cnf"`             // the agent's key the token is bound to
	DWK         string       `json:"dwk"`             // DWKPerson
	Exp         int64        `json:"exp"`
	IAT         int64        `json:"iat"`
	Iss         string       `json:"iss"`
	JTI         string       `json:"jti"`
	ParentAgent string       `json:"parent_agent,omitempty"`
	PS          string       `json:"ps,omitempty"`
	Scope       string       `json:"scope,omitempty"`
	Sub         string       `json:"sub"`
}

// authMembers are AuthClaims' JSON names, for decodeStrict.
var authMembers = []string{"act", "agent", "aud", "cnf", "dwk", "exp", "iat", "iss", "jti", "parent_agent", "ps", "scope", "sub"}

func (c *AuthClaims) times() (iat, exp int64) { return c.IAT, c.Exp }

// check validates an auth token's claims. Failures are CodeInvalidJWT, or
// CodeInvalidKey for cnf.jwk.
func (c *AuthClaims) check() error {
	switch {
	case c.Iss == "":
		return errf(CodeInvalidJWT, "iss missing")
	case c.DWK != DWKPerson:
		return errf(CodeInvalidJWT, "dwk must be "+DWKPerson)
	case c.Aud == "":
		return errf(CodeInvalidJWT, "aud missing")
	case c.JTI == "":
		return errf(CodeInvalidJWT, "jti missing")
	case c.Sub == "":
		return errf(CodeInvalidJWT, "sub missing")
	case c.IAT <= 0:
		return errf(CodeInvalidJWT, "iat missing")
	case c.Exp <= c.IAT:
		return errf(CodeInvalidJWT, "exp not after iat")
	case c.Exp-c.IAT > int64(MaxAuthLifetime/time.Second):
		return errf(CodeInvalidJWT, "lifetime over "+MaxAuthLifetime.String())
	case c.Act != nil && c.Act.Agent == "":
		return errf(CodeInvalidJWT, "act.agent missing")
	case c.Act != nil && c.ParentAgent != "" && c.Act.Agent != c.ParentAgent:
		return errf(CodeInvalidJWT, "act.agent differs from parent_agent")
	}
	if _, err := c.Cnf.JWK.PublicKey(); err != nil {
		return err
	}
	return nil
}

// IssueAuthToken signs an auth token. It refuses claims that
// VerifyAuthToken would refuse at iat: a missing iss, aud, jti, sub or iat,
// a dwk other than DWKPerson, exp <= iat, a lifetime over MaxAuthLifetime,
// an unusable cnf.jwk, an act without agent or naming another than
// parent_agent.
func IssueAuthToken(key Key, c AuthClaims) (string, error) {
	if err := c.check(); err != nil {
		return "", err
	}
	return sign(key, TypAuth, &c)
}

// VerifyAuthToken parses and verifies an auth token at now. keys resolves
// the header's kid to the person server's public key. Errors are *Error:
// CodeInvalidKey when the kid is unknown or cnf.jwk is unusable,
// CodeExpiredJWT when now is at or after exp, CodeInvalidJWT otherwise
// (malformed, wrong alg or typ, bad signature, iat in the future, claim
// rules). The caller checks aud, the HTTP signature's key against cnf.jwk,
// and revocation.
func VerifyAuthToken(token string, now time.Time, keys func(kid string) (ed25519.PublicKey, error)) (*AuthClaims, error) {
	var c AuthClaims
	if err := verify(token, now, keys, TypAuth, &c, authMembers...); err != nil {
		return nil, err
	}
	return &c, nil
}
