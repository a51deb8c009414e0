package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
)

// AlgEd25519 is the only JWS algorithm and JWK alg value this package uses
// (the fully specified name, not "EdDSA").
const AlgEd25519 = "Ed25519"

var b64 = base64.RawURLEncoding.Strict()

// Key is a signing key and the kid it is published under.
type Key struct {
	KID     string
	Private ed25519.PrivateKey
}

// JWK is an Ed25519 public key as an RFC 8037 OKP JSON Web Key. Fields are
// declared in lexicographic order of their JSON names so that the encoding
// has sorted keys.
type JWK struct {
	Alg string `json:"alg,omitempty"`
	Crv string `json:"crv"`
	KID string `json:"kid,omitempty"`
	Kty string `json:"kty"`
	X   string `json:"x"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK returns pub as a JWK carrying alg "Ed25519" and kid (omitted when
// empty).
func PublicJWK(pub ed25519.PublicKey, kid string) JWK {
	return JWK{Alg: AlgEd25519, Crv: "Ed25519", KID: kid, Kty: "OKP", X: b64.EncodeToString(pub)}
}

// PublicKey checks that j is an Ed25519 OKP key with alg "Ed25519" and
// returns its key. Failures are CodeInvalidKey.
func (j JWK) PublicKey() (ed25519.PublicKey, error) {
	if j.Kty != "OKP" || j.Crv != "Ed25519" {
		return nil, errf(CodeInvalidKey, "jwk is not an OKP Ed25519 key")
	}
	if j.Alg != AlgEd25519 {
		return nil, errf(CodeInvalidKey, "jwk alg must be Ed25519")
	}
	raw, err := b64.DecodeString(j.X)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errf(CodeInvalidKey, "jwk x is not a 32-byte base64url value")
	}
	return ed25519.PublicKey(raw), nil
}

// Thumbprint is the RFC 7638 thumbprint of an OKP key (required members crv,
// kty, x in lexicographic order, no whitespace; RFC 8037 section 2),
// base64url-encoded SHA-256.
func Thumbprint(j JWK) string {
	m := struct {
		Crv string `json:"crv"`
		Kty string `json:"kty"`
		X   string `json:"x"`
	}{j.Crv, j.Kty, j.X}
	b, _ := json.Marshal(m) // strings only: cannot fail
	sum := sha256.Sum256(b)
	return b64.EncodeToString(sum[:])
}

// jwkMembers are JWK's JSON names plus d, decoded only to be refused.
var jwkMembers = []string{"alg", "crv", "d", "kid", "kty", "x"}

// ParseJWK parses one JSON Web Key strictly (no duplicate members, no member
// name differing only in case from a known one) and checks it is a usable
// Ed25519 public key by JWK.PublicKey's rules. A key carrying the private
// member d is refused: it was published by mistake. Other members (use,
// key_ops) are ignored. Errors are *Error with CodeInvalidKey.
func ParseJWK(data []byte) (JWK, error) {
	var j struct {
		JWK
		D json.RawMessage `json:"d"`
	}
	if err := decodeStrict(data, &j, jwkMembers...); err != nil {
		return JWK{}, errf(CodeInvalidKey, "jwk: "+err.Error())
	}
	if j.D != nil {
		return JWK{}, errf(CodeInvalidKey, "jwk carries a private key (d)")
	}
	if _, err := j.JWK.PublicKey(); err != nil {
		return JWK{}, err
	}
	return j.JWK, nil
}

// ParseJWKS parses a JWK Set strictly: a keys array whose every key passes
// ParseJWK and carries a kid, no two the same. Errors are *Error with
// CodeInvalidKey.
func ParseJWKS(data []byte) (JWKS, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := decodeStrict(data, &raw, "keys"); err != nil {
		return JWKS{}, errf(CodeInvalidKey, "jwks: "+err.Error())
	}
	if raw.Keys == nil {
		return JWKS{}, errf(CodeInvalidKey, "jwks: keys missing")
	}
	s := JWKS{Keys: make([]JWK, 0, len(raw.Keys))}
	seen := map[string]bool{}
	for _, r := range raw.Keys {
		j, err := ParseJWK(r)
		if err != nil {
			return JWKS{}, err
		}
		if j.KID == "" {
			return JWKS{}, errf(CodeInvalidKey, "jwks: a key has no kid")
		}
		if seen[j.KID] {
			return JWKS{}, errf(CodeInvalidKey, "jwks: duplicate kid "+quote(j.KID))
		}
		seen[j.KID] = true
		s.Keys = append(s.Keys, j)
	}
	return s, nil
}

// KeyFunc returns a kid resolver over s for the Verify functions. An
// unknown kid, a kid two keys share, or an unusable key (possible when s was
// not built by ParseJWKS) is an *Error with CodeInvalidKey. It copies s, so
// later changes to s do not affect it.
func (s JWKS) KeyFunc() func(kid string) (ed25519.PublicKey, error) {
	m := make(map[string]*JWK, len(s.Keys))
	for _, k := range s.Keys {
		if _, dup := m[k.KID]; dup {
			m[k.KID] = nil // ambiguous: refuse rather than pick one
			continue
		}
		m[k.KID] = &k
	}
	return func(kid string) (ed25519.PublicKey, error) {
		k, ok := m[kid]
		switch {
		case !ok || kid == "":
			return nil, errf(CodeInvalidKey, "unknown kid "+quote(kid))
		case k == nil:
			return nil, errf(CodeInvalidKey, "kid "+quote(kid)+" names two keys")
		}
		return k.PublicKey()
	}
}
