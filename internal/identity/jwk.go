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
