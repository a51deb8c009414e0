package identity

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"time"
)

// header is the JOSE header, keys sorted.
type header struct {
	Alg string `json:"alg"`
	KID string `json:"kid"`
	Typ string `json:"typ"`
}

// headerMembers are the header's JSON names, plus crit, which is decoded
// only to be refused (RFC 7515 section 4.1.11: no extension is understood).
var headerMembers = []string{"alg", "crit", "kid", "typ"}

// claims is a token claim set: agent, auth or resource.
type claims interface {
	// check applies the claim rules that do not depend on the time.
	check() error
	times() (iat, exp int64)
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// sign serializes c as a compact JWS of type typ under key. The caller has
// checked c.
func sign(key Key, typ string, c claims) (string, error) {
	if key.KID == "" || len(key.Private) != ed25519.PrivateKeySize {
		return "", errf(CodeInvalidKey, "signing key needs a kid and a 64-byte Ed25519 private key")
	}
	h, err := marshal(header{Alg: AlgEd25519, KID: key.KID, Typ: typ})
	if err != nil {
		return "", err
	}
	p, err := marshal(c)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	sig := ed25519.Sign(key.Private, []byte(input))
	return input + "." + b64.EncodeToString(sig), nil
}

// split splits a compact JWS into its three segments and decodes its
// header strictly.
func split(token string) (h header, hs, ps, ss string, err error) {
	hs, rest, ok := strings.Cut(token, ".")
	ps, ss, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(ss, ".") {
		return h, "", "", "", errf(CodeInvalidJWT, "not a JWS compact serialization")
	}
	hb, err := b64.DecodeString(hs)
	if err != nil {
		return h, "", "", "", errf(CodeInvalidJWT, "header is not base64url")
	}
	var hc struct {
		header
		Crit json.RawMessage `json:"crit"`
	}
	if err := decodeStrict(hb, &hc, headerMembers...); err != nil {
		return h, "", "", "", errf(CodeInvalidJWT, "header: "+err.Error())
	}
	if hc.Crit != nil {
		return h, "", "", "", errf(CodeInvalidJWT, "header: crit is not supported")
	}
	return hc.header, hs, ps, ss, nil
}

// verify verifies token as a JWS of type typ and decodes its payload into c
// (members are c's JSON names), then applies c's rules and the time rules.
// Errors are *Error: CodeInvalidKey for an unknown kid (and whatever c.check
// says), CodeExpiredJWT when now is at or after exp, CodeInvalidJWT
// otherwise.
func verify(token string, now time.Time, keys func(kid string) (ed25519.PublicKey, error), typ string, c claims, members ...string) error {
	h, hs, ps, ss, err := split(token)
	if err != nil {
		return err
	}
	if h.Alg != AlgEd25519 {
		return errf(CodeInvalidJWT, "alg must be Ed25519")
	}
	if h.Typ != typ {
		return errf(CodeInvalidJWT, "typ is "+quote(h.Typ)+", want "+quote(typ))
	}
	if h.KID == "" {
		return errf(CodeInvalidJWT, "kid missing")
	}
	sig, err := b64.DecodeString(ss)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errf(CodeInvalidJWT, "signature is not a 64-byte base64url value")
	}
	pub, err := keys(h.KID)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return errf(CodeInvalidKey, "unknown or unusable kid "+quote(h.KID))
	}
	if !ed25519.Verify(pub, []byte(token[:len(hs)+1+len(ps)]), sig) {
		return errf(CodeInvalidJWT, "signature does not verify")
	}
	pb, err := b64.DecodeString(ps)
	if err != nil {
		return errf(CodeInvalidJWT, "payload is not base64url")
	}
	if err := decodeStrict(pb, c, members...); err != nil {
		return errf(CodeInvalidJWT, "payload: "+err.Error())
	}
	if err := c.check(); err != nil {
		return err
	}
	iat, exp := c.times()
	if now.Unix() >= exp {
		return errf(CodeExpiredJWT, "token expired")
	}
	if time.Unix(iat, 0).After(now.Add(MaxIATSkew)) {
		return errf(CodeInvalidJWT, "iat in the future")
	}
	return nil
}

// quote renders an untrusted string for an error detail.
func quote(s string) string {
	b, _ := json.Marshal(s) // a string: cannot fail
	return string(b)
}

// Peek returns a compact JWS's header typ and kid and its payload's iss
// without verifying anything: it is for routing a token to its verifier and
// its issuer's keys, and nothing it returns is to be trusted. The header is
// decoded as strictly as when verifying. Errors are *Error with
// CodeInvalidJWT.
func Peek(token string) (typ, kid, iss string, err error) {
	h, _, ps, _, err := split(token)
	if err != nil {
		return "", "", "", err
	}
	pb, err := b64.DecodeString(ps)
	if err != nil {
		return "", "", "", errf(CodeInvalidJWT, "payload is not base64url")
	}
	var p struct {
		Iss string `json:"iss"`
	}
	if err := decodeStrict(pb, &p, "iss"); err != nil {
		return "", "", "", errf(CodeInvalidJWT, "payload: "+err.Error())
	}
	return h.Typ, h.KID, p.Iss, nil
}
