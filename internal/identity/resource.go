package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"time"
)

// ResourceClaims is a resource token's claim set (typ aa-resource+jwt),
// issued by a resource to an agent that called it. Fields are declared in
// lexicographic order of their JSON names, so the payload has sorted keys.
// Unknown claims are ignored when verifying.
type ResourceClaims struct {
	Agent        string `json:"agent,omitempty"`
	AgentJKT     string `json:"agent_jkt"` // RFC 7638 thumbprint of the calling agent's key
	Aud          string `json:"aud"`       // the person/auth server that will exchange it
	DWK          string `json:"dwk"`       // DWKResource
	Exp          int64  `json:"exp"`
	IAT          int64  `json:"iat"`
	Iss          string `json:"iss"` // the resource
	JTI          string `json:"jti"`
	PresentedJTI string `json:"presented_jti,omitempty"`
	PS           string `json:"ps,omitempty"`
	Scope        string `json:"scope,omitempty"`
	Sub          string `json:"sub,omitempty"`
}

// resourceMembers are ResourceClaims' JSON names, for decodeStrict.
var resourceMembers = []string{"agent", "agent_jkt", "aud", "dwk", "exp", "iat", "iss", "jti", "presented_jti", "ps", "scope", "sub"}

func (c *ResourceClaims) times() (iat, exp int64) { return c.IAT, c.Exp }

// check validates a resource token's claims. Failures are CodeInvalidJWT.
func (c *ResourceClaims) check() error {
	switch {
	case c.Iss == "":
		return errf(CodeInvalidJWT, "iss missing")
	case c.DWK != DWKResource:
		return errf(CodeInvalidJWT, "dwk must be "+DWKResource)
	case c.Aud == "":
		return errf(CodeInvalidJWT, "aud missing")
	case c.JTI == "":
		return errf(CodeInvalidJWT, "jti missing")
	case !isThumbprint(c.AgentJKT):
		return errf(CodeInvalidJWT, "agent_jkt is not a base64url SHA-256 thumbprint")
	case c.IAT <= 0:
		return errf(CodeInvalidJWT, "iat missing")
	case c.Exp <= c.IAT:
		return errf(CodeInvalidJWT, "exp not after iat")
	case c.Exp-c.IAT > int64(MaxResourceLifetime/time.Second):
		return errf(CodeInvalidJWT, "lifetime over "+MaxResourceLifetime.String())
	}
	return nil
}

// isThumbprint reports whether s is 43 characters of unpadded base64url
// encoding 32 bytes (the strict decoder refuses non-zero trailing bits, so
// each digest has one spelling).
func isThumbprint(s string) bool {
	if len(s) != 43 {
		return false
	}
	raw, err := b64.DecodeString(s)
	return err == nil && len(raw) == sha256.Size
}

// IssueResourceToken signs a resource token. It refuses claims that
// VerifyResourceToken would refuse at iat: a missing iss, aud, jti or iat, a
// dwk other than DWKResource, an agent_jkt that is not a thumbprint, exp <=
// iat, a lifetime over MaxResourceLifetime.
func IssueResourceToken(key Key, c ResourceClaims) (string, error) {
	if err := c.check(); err != nil {
		return "", err
	}
	return sign(key, TypResource, &c)
}

// VerifyResourceToken parses and verifies a resource token at now. keys
// resolves the header's kid to the resource's public key. Errors are
// *Error: CodeInvalidKey when the kid is unknown, CodeExpiredJWT when now is
// at or after exp, CodeInvalidJWT otherwise. The caller checks aud and that
// agent_jkt is the presenting agent's key.
func VerifyResourceToken(token string, now time.Time, keys func(kid string) (ed25519.PublicKey, error)) (*ResourceClaims, error) {
	var c ResourceClaims
	if err := verify(token, now, keys, TypResource, &c, resourceMembers...); err != nil {
		return nil, err
	}
	return &c, nil
}
