package identity

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// rawVectors returns the vectors' top-level members undecoded.
func rawVectors(t testing.TB) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJWKS(t testing.TB, raw []byte) JWKS {
	t.Helper()
	s, err := ParseJWKS(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParseJWKSVectors(t *testing.T) {
	raw := rawVectors(t)
	v := loadVectors(t)
	n := 0
	for name, r := range raw {
		if !strings.HasSuffix(name, "_jwks") {
			continue
		}
		n++
		s, err := ParseJWKS(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plain JWKS
		_ = json.Unmarshal(r, &plain)
		if !reflect.DeepEqual(s, plain) {
			t.Fatalf("%s: %+v, want %+v", name, s, plain)
		}
	}
	if n != 3 {
		t.Fatalf("%d JWK sets in the vectors, want 3 (ap, ps, resource)", n)
	}
	for _, name := range []string{"parent_agent_jwk", "subagent_jwk"} {
		j, err := ParseJWK(raw[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "subagent_jwk" && j != v.SubagentJWK {
			t.Fatalf("%s: %+v", name, j)
		}
	}
}

func TestAuthVector(t *testing.T) {
	raw, v := rawVectors(t), loadVectors(t)
	ps := mustJWKS(t, raw["ps_jwks"])
	c, err := VerifyAuthToken(v.Tokens.Auth, vectorClock, ps.KeyFunc())
	if err != nil {
		t.Fatal(err)
	}
	want := AuthClaims{
		Aud: "https://resource.example", Cnf: Confirmation{JWK: v.SubagentJWK}, DWK: DWKPerson,
		Exp: 1730221200, IAT: 1730217600, Iss: "https://ps.example", JTI: "au-5521",
		PS: "https://ps.example", Scope: "data.read", Sub: "8f14e45fceea167a5a36dedd4bea2543",
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("claims %+v\nwant %+v", *c, want)
	}
	typ, kid, iss, err := Peek(v.Tokens.Auth)
	if err != nil || typ != TypAuth || kid != "ps-key-1" || iss != "https://ps.example" {
		t.Fatalf("Peek = %q %q %q %v", typ, kid, iss, err)
	}
	// Sorted keys: re-signing the claims reproduces the signing input.
	tok, err := IssueAuthToken(Key{KID: "ps-key-1", Private: labelKey("test ps key")}, *c)
	if err != nil || signingInput(tok) != signingInput(v.Tokens.Auth) {
		t.Fatalf("reissue: %v\n got %s\nwant %s", err, signingInput(tok), signingInput(v.Tokens.Auth))
	}
}

func TestResourceVector(t *testing.T) {
	raw, v := rawVectors(t), loadVectors(t)
	rs := mustJWKS(t, raw["resource_jwks"])
	c, err := VerifyResourceToken(v.Tokens.Resource, vectorClock, rs.KeyFunc())
	if err != nil {
		t.Fatal(err)
	}
	want := ResourceClaims{
		AgentJKT: v.SubagentJKT, Aud: "https://ps.example", DWK: DWKResource,
		Exp: 1730217900, IAT: 1730217600, Iss: "https://resource.example", JTI: "rt-77c1",
		PresentedJTI: "pt-3ab910", PS: "https://ps.example", Scope: "data.read",
		Sub: "8f14e45fceea167a5a36dedd4bea2543",
	}
	if *c != want {
		t.Fatalf("claims %+v\nwant %+v", *c, want)
	}
	tok, err := IssueResourceToken(Key{KID: "rs-key-1", Private: labelKey("test rs key")}, *c)
	if err != nil || signingInput(tok) != signingInput(v.Tokens.Resource) {
		t.Fatalf("reissue: %v\n got %s\nwant %s", err, signingInput(tok), signingInput(v.Tokens.Resource))
	}
}

func TestAuthResourceSingleByteChanges(t *testing.T) {
	raw, v := rawVectors(t), loadVectors(t)
	ps, rs := mustJWKS(t, raw["ps_jwks"]).KeyFunc(), mustJWKS(t, raw["resource_jwks"]).KeyFunc()
	t.Run("auth", func(t *testing.T) {
		t.Parallel()
		refuseEveryByteChange(t, v.Tokens.Auth, func(m string) error {
			_, err := VerifyAuthToken(m, vectorClock, ps)
			return err
		})
	})
	t.Run("resource", func(t *testing.T) {
		t.Parallel()
		refuseEveryByteChange(t, v.Tokens.Resource, func(m string) error {
			_, err := VerifyResourceToken(m, vectorClock, rs)
			return err
		})
	})
}

func TestWrongTyp(t *testing.T) {
	raw, v := rawVectors(t), loadVectors(t)
	ps, rs, ap := mustJWKS(t, raw["ps_jwks"]).KeyFunc(), mustJWKS(t, raw["resource_jwks"]).KeyFunc(), jwksLookup(v.APJWKS)
	_, err := VerifyAuthToken(v.Tokens.Person, vectorClock, ps)
	wantCode(t, err, CodeInvalidJWT)
	if !strings.Contains(err.Error(), TypPerson) || !strings.Contains(err.Error(), TypAuth) {
		t.Fatalf("message does not name got and wanted typ: %v", err)
	}
	for _, keys := range []func(string) (ed25519.PublicKey, error){ap, ps, rs} {
		_, err = VerifyAuthToken(v.Tokens.Parent, vectorClock, keys)
		wantCode(t, err, CodeInvalidJWT)
		_, err = VerifyResourceToken(v.Tokens.Sub, vectorClock, keys)
		wantCode(t, err, CodeInvalidJWT)
		_, err = VerifyResourceToken(v.Tokens.Auth, vectorClock, keys)
		wantCode(t, err, CodeInvalidJWT)
		_, err = VerifyAuthToken(v.Tokens.Resource, vectorClock, keys)
		wantCode(t, err, CodeInvalidJWT)
		_, err = VerifyAgentToken(v.Tokens.Auth, vectorClock, keys)
		wantCode(t, err, CodeInvalidJWT)
	}
}

// authFixture is a person server and a resource, each with a known key.
type authFixture struct {
	ps, rs   Key
	keys     func(string) (ed25519.PublicKey, error)
	auth     AuthClaims
	resource ResourceClaims
	agentJWK JWK
}

func newAuthFixture(t testing.TB) authFixture {
	ps := Key{KID: "ps-key-1", Private: labelKey("ps")}
	rs := Key{KID: "rs-key-1", Private: labelKey("rs")}
	set := JWKS{Keys: []JWK{
		PublicJWK(ps.Private.Public().(ed25519.PublicKey), ps.KID),
		PublicJWK(rs.Private.Public().(ed25519.PublicKey), rs.KID),
	}}
	agent := PublicJWK(labelKey("agent").Public().(ed25519.PublicKey), "")
	iat := vectorClock.Unix()
	return authFixture{
		ps: ps, rs: rs, keys: set.KeyFunc(), agentJWK: agent,
		auth: AuthClaims{
			Act: &Actor{Agent: "aauth:planner@agent.example"}, Agent: "aauth:planner+s1@agent.example",
			Aud: "https://resource.example", Cnf: Confirmation{JWK: agent}, DWK: DWKPerson,
			Exp: iat + 3600, IAT: iat, Iss: "https://ps.example", JTI: "au-1",
			ParentAgent: "aauth:planner@agent.example", PS: "https://ps.example", Scope: "data.read", Sub: "user-1",
		},
		resource: ResourceClaims{
			Agent: "aauth:planner+s1@agent.example", AgentJKT: Thumbprint(agent), Aud: "https://ps.example",
			DWK: DWKResource, Exp: iat + 300, IAT: iat, Iss: "https://resource.example", JTI: "rt-1",
			PresentedJTI: "pt-1", PS: "https://ps.example", Scope: "data.read", Sub: "user-1",
		},
	}
}

func TestAuthResourceRoundTrip(t *testing.T) {
	f := newAuthFixture(t)
	tok, err := IssueAuthToken(f.ps, f.auth)
	if err != nil {
		t.Fatal(err)
	}
	a, err := VerifyAuthToken(tok, vectorClock, f.keys)
	if err != nil || !reflect.DeepEqual(*a, f.auth) {
		t.Fatalf("auth: %+v %v", a, err)
	}
	tok, err = IssueResourceToken(f.rs, f.resource)
	if err != nil {
		t.Fatal(err)
	}
	r, err := VerifyResourceToken(tok, vectorClock, f.keys)
	if err != nil || *r != f.resource {
		t.Fatalf("resource: %+v %v", r, err)
	}
	// Minimal claim sets.
	min := AuthClaims{Aud: "r", Cnf: f.auth.Cnf, DWK: DWKPerson, Exp: f.auth.Exp, IAT: f.auth.IAT, Iss: "i", JTI: "j", Sub: "s"}
	tok, err = IssueAuthToken(f.ps, min)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := VerifyAuthToken(tok, vectorClock, f.keys); err != nil || !reflect.DeepEqual(*a, min) {
		t.Fatalf("minimal auth: %+v %v", a, err)
	}
	rmin := ResourceClaims{AgentJKT: f.resource.AgentJKT, Aud: "a", DWK: DWKResource, Exp: f.resource.Exp, IAT: f.resource.IAT, Iss: "i", JTI: "j"}
	tok, err = IssueResourceToken(f.rs, rmin)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := VerifyResourceToken(tok, vectorClock, f.keys); err != nil || *r != rmin {
		t.Fatalf("minimal resource: %+v %v", r, err)
	}
}

func TestAuthResourceExpiry(t *testing.T) {
	f := newAuthFixture(t)
	at, _ := IssueAuthToken(f.ps, f.auth)
	rt, _ := IssueResourceToken(f.rs, f.resource)
	for _, c := range []struct {
		name   string
		exp    int64
		verify func(time.Time) error
	}{
		{"auth", f.auth.Exp, func(now time.Time) error { _, err := VerifyAuthToken(at, now, f.keys); return err }},
		{"resource", f.resource.Exp, func(now time.Time) error { _, err := VerifyResourceToken(rt, now, f.keys); return err }},
	} {
		exp := time.Unix(c.exp, 0)
		if err := c.verify(exp.Add(-time.Second)); err != nil {
			t.Fatalf("%s one second before exp: %v", c.name, err)
		}
		wantCode(t, c.verify(exp), CodeExpiredJWT)
		wantCode(t, c.verify(exp.Add(time.Second)), CodeExpiredJWT)
		wantCode(t, c.verify(vectorClock.Add(-MaxIATSkew-time.Second)), CodeInvalidJWT)
		if err := c.verify(vectorClock.Add(-MaxIATSkew)); err != nil {
			t.Fatalf("%s iat exactly MaxIATSkew ahead: %v", c.name, err)
		}
	}
}

func TestAuthIssueRefusals(t *testing.T) {
	f := newAuthFixture(t)
	for name, mod := range map[string]func(*AuthClaims){
		"no iss":              func(c *AuthClaims) { c.Iss = "" },
		"dwk agent":           func(c *AuthClaims) { c.DWK = DWK },
		"dwk resource":        func(c *AuthClaims) { c.DWK = DWKResource },
		"no aud":              func(c *AuthClaims) { c.Aud = "" },
		"no jti":              func(c *AuthClaims) { c.JTI = "" },
		"no sub":              func(c *AuthClaims) { c.Sub = "" },
		"no iat":              func(c *AuthClaims) { c.IAT, c.Exp = 0, 60 },
		"exp equals iat":      func(c *AuthClaims) { c.Exp = c.IAT },
		"exp before iat":      func(c *AuthClaims) { c.Exp = c.IAT - 1 },
		"over max lifetime":   func(c *AuthClaims) { c.Exp = c.IAT + int64(MaxAuthLifetime/time.Second) + 1 },
		"cnf jwk without alg": func(c *AuthClaims) { c.Cnf.JWK.Alg = "" },
		"cnf jwk EdDSA":       func(c *AuthClaims) { c.Cnf.JWK.Alg = "EdDSA" },
		"cnf jwk empty":       func(c *AuthClaims) { c.Cnf.JWK = JWK{} },
		"act empty":           func(c *AuthClaims) { c.Act = &Actor{} },
		"act differs":         func(c *AuthClaims) { c.Act = &Actor{Agent: "aauth:other@agent.example"} },
	} {
		c := f.auth
		mod(&c)
		if tok, err := IssueAuthToken(f.ps, c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
	c := f.auth
	c.Exp = c.IAT + int64(MaxAuthLifetime/time.Second)
	if _, err := IssueAuthToken(f.ps, c); err != nil {
		t.Fatalf("exactly the max lifetime: %v", err)
	}
	c.ParentAgent = "" // act alone is allowed
	if _, err := IssueAuthToken(f.ps, c); err != nil {
		t.Fatalf("act without parent_agent: %v", err)
	}
	if _, err := IssueAuthToken(Key{Private: f.ps.Private}, f.auth); err == nil {
		t.Fatal("key without kid")
	}
}

func TestResourceIssueRefusals(t *testing.T) {
	f := newAuthFixture(t)
	jkt := f.resource.AgentJKT
	for name, mod := range map[string]func(*ResourceClaims){
		"no iss":             func(c *ResourceClaims) { c.Iss = "" },
		"dwk person":         func(c *ResourceClaims) { c.DWK = DWKPerson },
		"no aud":             func(c *ResourceClaims) { c.Aud = "" },
		"no jti":             func(c *ResourceClaims) { c.JTI = "" },
		"no agent_jkt":       func(c *ResourceClaims) { c.AgentJKT = "" },
		"agent_jkt short":    func(c *ResourceClaims) { c.AgentJKT = jkt[:42] },
		"agent_jkt long":     func(c *ResourceClaims) { c.AgentJKT = jkt + "A" },
		"agent_jkt padded":   func(c *ResourceClaims) { c.AgentJKT = jkt + "=" },
		"agent_jkt std b64":  func(c *ResourceClaims) { c.AgentJKT = "+" + jkt[1:] },
		"agent_jkt low bits": func(c *ResourceClaims) { c.AgentJKT = jkt[:42] + flipLowBit(jkt[42]) },
		"no iat":             func(c *ResourceClaims) { c.IAT, c.Exp = 0, 60 },
		"exp equals iat":     func(c *ResourceClaims) { c.Exp = c.IAT },
		"over max lifetime":  func(c *ResourceClaims) { c.Exp = c.IAT + int64(MaxResourceLifetime/time.Second) + 1 },
	} {
		c := f.resource
		mod(&c)
		if tok, err := IssueResourceToken(f.rs, c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
	c := f.resource
	c.Exp = c.IAT + int64(MaxResourceLifetime/time.Second)
	if _, err := IssueResourceToken(f.rs, c); err != nil {
		t.Fatalf("exactly the max lifetime: %v", err)
	}
}

// flipLowBit returns the base64url digit whose value differs from d's in the
// lowest bit (a non-canonical final digit when d's low bits are zero).
func flipLowBit(d byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return string(alphabet[strings.IndexByte(alphabet, d)^1])
}

// forgeWith signs arbitrary header and payload JSON with key.
func forgeWith(key ed25519.PrivateKey, hdr, payload string) string {
	in := b64.EncodeToString([]byte(hdr)) + "." + b64.EncodeToString([]byte(payload))
	return in + "." + b64.EncodeToString(ed25519.Sign(key, []byte(in)))
}

func TestAuthVerifyRejects(t *testing.T) {
	f := newAuthFixture(t)
	good, _ := IssueAuthToken(f.ps, f.auth)
	parts := strings.Split(good, ".")
	pl, _ := b64.DecodeString(parts[1])
	payload := string(pl)
	okHdr := `{"alg":"Ed25519","kid":"ps-key-1","typ":"aa-auth+jwt"}`
	if _, err := VerifyAuthToken(forgeWith(f.ps.Private, okHdr, payload), vectorClock, f.keys); err != nil {
		t.Fatalf("forge baseline: %v", err)
	}
	// HS256 keyed with the public key: the classic algorithm confusion.
	hsIn := b64.EncodeToString([]byte(`{"alg":"HS256","kid":"ps-key-1","typ":"aa-auth+jwt"}`)) + "." + parts[1]
	mac := hmac.New(sha256.New, f.ps.Private.Public().(ed25519.PublicKey))
	mac.Write([]byte(hsIn))
	hs256 := hsIn + "." + b64.EncodeToString(mac.Sum(nil))
	sub := func(old, new string) string { return strings.Replace(payload, old, new, 1) }
	for _, c := range []struct {
		name, hdr, payload string
		code               Code
	}{
		{"alg EdDSA", `{"alg":"EdDSA","kid":"ps-key-1","typ":"aa-auth+jwt"}`, payload, CodeInvalidJWT},
		{"alg ed25519", `{"alg":"ed25519","kid":"ps-key-1","typ":"aa-auth+jwt"}`, payload, CodeInvalidJWT},
		{"typ person", `{"alg":"Ed25519","kid":"ps-key-1","typ":"aa-person+jwt"}`, payload, CodeInvalidJWT},
		{"typ upper", `{"alg":"Ed25519","kid":"ps-key-1","typ":"AA-AUTH+JWT"}`, payload, CodeInvalidJWT},
		{"no typ", `{"alg":"Ed25519","kid":"ps-key-1"}`, payload, CodeInvalidJWT},
		{"no kid", `{"alg":"Ed25519","typ":"aa-auth+jwt"}`, payload, CodeInvalidJWT},
		{"unknown kid", `{"alg":"Ed25519","kid":"ps-key-2","typ":"aa-auth+jwt"}`, payload, CodeInvalidKey},
		{"crit", `{"alg":"Ed25519","crit":["exp"],"kid":"ps-key-1","typ":"aa-auth+jwt"}`, payload, CodeInvalidJWT},
		{"header case", `{"alg":"Ed25519","kid":"ps-key-1","typ":"aa-auth+jwt","Typ":"x"}`, payload, CodeInvalidJWT},
		{"cnf jwk without alg", okHdr, sub(`"alg":"Ed25519",`, ""), CodeInvalidKey},
		{"cnf jwk EdDSA", okHdr, sub(`"alg":"Ed25519"`, `"alg":"EdDSA"`), CodeInvalidKey},
		{"dwk", okHdr, sub(DWKPerson, DWK), CodeInvalidJWT},
		{"no aud", okHdr, sub(`"aud":"https://resource.example",`, ""), CodeInvalidJWT},
		{"aud case", okHdr, sub(`"aud":`, `"AUD":"x","aud":`), CodeInvalidJWT},
		{"duplicate sub", okHdr, sub(`"sub":`, `"sub":"x","sub":`), CodeInvalidJWT},
		{"act differs", okHdr, sub(`"act":{"agent":"aauth:planner@`, `"act":{"agent":"aauth:other@`), CodeInvalidJWT},
		{"act empty", okHdr, sub(`"act":{"agent":"aauth:planner@agent.example"}`, `"act":{}`), CodeInvalidJWT},
		{"lifetime", okHdr, sub(`"exp":1730221200`, `"exp":1730221201`), CodeInvalidJWT},
		{"exp float", okHdr, sub(`"exp":1730221200`, `"exp":1730221200.5`), CodeInvalidJWT},
		{"payload array", okHdr, `[` + payload + `]`, CodeInvalidJWT},
	} {
		_, err := VerifyAuthToken(forgeWith(f.ps.Private, c.hdr, c.payload), vectorClock, f.keys)
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.code)
		}
	}
	for name, tok := range map[string]string{
		"alg none":       b64.EncodeToString([]byte(`{"alg":"none","kid":"ps-key-1","typ":"aa-auth+jwt"}`)) + "." + parts[1] + ".",
		"HS256":          hs256,
		"resource key":   forgeWith(f.rs.Private, okHdr, payload),
		"signature cut":  good[:len(good)-2],
		"signature trim": parts[0] + "." + parts[1] + "." + parts[2][:42],
	} {
		_, err := VerifyAuthToken(tok, vectorClock, f.keys)
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != CodeInvalidJWT {
			t.Errorf("%s: err = %v, want %s", name, err, CodeInvalidJWT)
		}
	}
}

func TestResourceVerifyRejects(t *testing.T) {
	f := newAuthFixture(t)
	good, _ := IssueResourceToken(f.rs, f.resource)
	pl, _ := b64.DecodeString(strings.Split(good, ".")[1])
	payload := string(pl)
	okHdr := `{"alg":"Ed25519","kid":"rs-key-1","typ":"aa-resource+jwt"}`
	if _, err := VerifyResourceToken(forgeWith(f.rs.Private, okHdr, payload), vectorClock, f.keys); err != nil {
		t.Fatalf("forge baseline: %v", err)
	}
	sub := func(old, new string) string { return strings.Replace(payload, old, new, 1) }
	for name, c := range map[string]struct {
		hdr, payload string
		code         Code
	}{
		"alg EdDSA":     {`{"alg":"EdDSA","kid":"rs-key-1","typ":"aa-resource+jwt"}`, payload, CodeInvalidJWT},
		"typ auth":      {`{"alg":"Ed25519","kid":"rs-key-1","typ":"aa-auth+jwt"}`, payload, CodeInvalidJWT},
		"unknown kid":   {`{"alg":"Ed25519","kid":"x","typ":"aa-resource+jwt"}`, payload, CodeInvalidKey},
		"dwk":           {okHdr, sub(DWKResource, DWKPerson), CodeInvalidJWT},
		"jkt short":     {okHdr, sub(f.resource.AgentJKT, f.resource.AgentJKT[:42]), CodeInvalidJWT},
		"jkt case":      {okHdr, sub(`"agent_jkt"`, `"AGENT_JKT":"x","agent_jkt"`), CodeInvalidJWT},
		"no jti":        {okHdr, sub(`"jti":"rt-1",`, ""), CodeInvalidJWT},
		"lifetime":      {okHdr, sub(`"exp":1730217900`, `"exp":1730221201`), CodeInvalidJWT},
		"scope number":  {okHdr, sub(`"scope":"data.read"`, `"scope":1`), CodeInvalidJWT},
		"trailing data": {okHdr, payload + " {}", CodeInvalidJWT},
	} {
		_, err := VerifyResourceToken(forgeWith(f.rs.Private, c.hdr, c.payload), vectorClock, f.keys)
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("%s: err = %v, want %s", name, err, c.code)
		}
	}
}

func TestPeek(t *testing.T) {
	v := loadVectors(t)
	for _, c := range []struct{ tok, typ, kid, iss string }{
		{v.Tokens.Parent, TypAgent, "ap-key-1", "https://agent.example"},
		{v.Tokens.Person, TypPerson, "ps-key-1", "https://ps.example"},
		{v.Tokens.Auth, TypAuth, "ps-key-1", "https://ps.example"},
		{v.Tokens.Resource, TypResource, "rs-key-1", "https://resource.example"},
		// Peek verifies nothing: a missing signature is no obstacle.
		{signingInput(v.Tokens.Auth) + ".", TypAuth, "ps-key-1", "https://ps.example"},
	} {
		typ, kid, iss, err := Peek(c.tok)
		if err != nil || typ != c.typ || kid != c.kid || iss != c.iss {
			t.Errorf("Peek = %q %q %q %v, want %q %q %q", typ, kid, iss, err, c.typ, c.kid, c.iss)
		}
	}
	hdr := b64.EncodeToString([]byte(`{"alg":"Ed25519","kid":"k","typ":"t"}`))
	for name, tok := range map[string]string{
		"empty":        "",
		"two parts":    signingInput(v.Tokens.Auth),
		"four parts":   v.Tokens.Auth + ".x",
		"header b64":   "!" + v.Tokens.Auth,
		"header dup":   b64.EncodeToString([]byte(`{"kid":"a","kid":"b"}`)) + ".e30.",
		"header crit":  b64.EncodeToString([]byte(`{"crit":["x"]}`)) + ".e30.",
		"payload b64":  hdr + ".e30=.",
		"payload iss":  hdr + "." + b64.EncodeToString([]byte(`{"iss":"a","ISS":"b"}`)) + ".",
		"iss number":   hdr + "." + b64.EncodeToString([]byte(`{"iss":1}`)) + ".",
		"payload null": hdr + "." + b64.EncodeToString([]byte(`null`)) + ".",
	} {
		_, _, _, err := Peek(tok)
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != CodeInvalidJWT {
			t.Errorf("%s: err = %v, want %s", name, err, CodeInvalidJWT)
		}
	}
}

func TestParseJWKRejects(t *testing.T) {
	x := `"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"`
	ok := `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP",` + x + `}`
	if _, err := ParseJWK([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	if j, err := ParseJWK([]byte(`{"use":"sig","kid":"k","alg":"Ed25519","crv":"Ed25519","kty":"OKP",` + x + `}`)); err != nil || j.KID != "k" {
		t.Fatalf("unknown member and kid: %+v %v", j, err)
	}
	for name, s := range map[string]string{
		"no alg":       `{"crv":"Ed25519","kty":"OKP",` + x + `}`,
		"alg EdDSA":    `{"alg":"EdDSA","crv":"Ed25519","kty":"OKP",` + x + `}`,
		"crv X25519":   `{"alg":"Ed25519","crv":"X25519","kty":"OKP",` + x + `}`,
		"kty EC":       `{"alg":"Ed25519","crv":"Ed25519","kty":"EC",` + x + `}`,
		"short x":      `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","x":"AAAA"}`,
		"padded x":     `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo="}`,
		"duplicate x":  `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","x":"AAAA",` + x + `}`,
		"case X":       `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","X":"AAAA",` + x + `}`,
		"case Alg":     `{"Alg":"Ed25519","crv":"Ed25519","kty":"OKP",` + x + `}`,
		"private d":    `{"alg":"Ed25519","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A","kty":"OKP",` + x + `}`,
		"x number":     `{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","x":1}`,
		"array":        `[` + ok + `]`,
		"trailing":     ok + `{}`,
		"empty":        ``,
		"null":         `null`,
		"invalid utf8": "{\"alg\":\"Ed25519\xff\",\"crv\":\"Ed25519\",\"kty\":\"OKP\"," + x + "}",
	} {
		_, err := ParseJWK([]byte(s))
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != CodeInvalidKey {
			t.Errorf("%s: err = %v, want %s", name, err, CodeInvalidKey)
		}
	}
}

func TestParseJWKSRejects(t *testing.T) {
	k := func(kid string) string {
		return `{"alg":"Ed25519","crv":"Ed25519","kid":"` + kid + `","kty":"OKP","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`
	}
	s, err := ParseJWKS([]byte(`{"keys":[` + k("a") + `,` + k("b") + `]}`))
	if err != nil || len(s.Keys) != 2 {
		t.Fatalf("%+v %v", s, err)
	}
	keys := s.KeyFunc()
	if pub, err := keys("b"); err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("kid b: %v", err)
	}
	for _, kid := range []string{"c", "", "A"} {
		_, err := keys(kid)
		wantCode(t, err, CodeInvalidKey)
	}
	if _, err := ParseJWKS([]byte(`{"keys":[]}`)); err != nil {
		t.Fatalf("empty set: %v", err)
	}
	for name, s := range map[string]string{
		"no kid":        `{"keys":[` + strings.Replace(k("a"), `"kid":"a",`, "", 1) + `]}`,
		"duplicate kid": `{"keys":[` + k("a") + `,` + k("a") + `]}`,
		"bad key":       `{"keys":[` + k("a") + `,` + strings.Replace(k("b"), `"alg":"Ed25519",`, "", 1) + `]}`,
		"keys case":     `{"keys":[],"Keys":[]}`,
		"keys dup":      `{"keys":[],"keys":[]}`,
		"no keys":       `{}`,
		"keys null":     `{"keys":null}`,
		"keys object":   `{"keys":{}}`,
		"key null":      `{"keys":[null]}`,
		"not object":    `[]`,
	} {
		_, err := ParseJWKS([]byte(s))
		if e := (*Error)(nil); !errors.As(err, &e) || e.Code != CodeInvalidKey {
			t.Errorf("%s: err = %v, want %s", name, err, CodeInvalidKey)
		}
	}
	// A hand-built set with a shared kid resolves it to neither key.
	j := PublicJWK(labelKey("a").Public().(ed25519.PublicKey), "k")
	_, err = JWKS{Keys: []JWK{j, j}}.KeyFunc()("k")
	wantCode(t, err, CodeInvalidKey)
}

// TestMemberLists: decodeStrict's member lists are the structs' JSON names.
func TestMemberLists(t *testing.T) {
	names := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			out = append(out, name)
		}
		return out
	}
	for _, c := range []struct {
		v    any
		list []string
	}{
		{AgentClaims{}, agentMembers},
		{AuthClaims{}, authMembers},
		{ResourceClaims{}, resourceMembers},
	} {
		got := names(c.v)
		if !slices.Equal(got, c.list) || !slices.IsSorted(got) {
			t.Errorf("%T: fields %v, member list %v (both sorted)", c.v, got, c.list)
		}
	}
	if got := append(names(JWK{}), "d"); !slices.Equal(slices.Sorted(slices.Values(got)), jwkMembers) {
		t.Errorf("JWK members %v, list %v", got, jwkMembers)
	}
}

func FuzzParseJWK(f *testing.F) {
	raw := rawVectors(f)
	for _, name := range []string{"parent_agent_jwk", "subagent_jwk"} {
		f.Add([]byte(raw[name]))
	}
	for _, name := range []string{"ap_jwks", "ps_jwks", "resource_jwks"} {
		var s struct{ Keys []json.RawMessage }
		_ = json.Unmarshal(raw[name], &s)
		f.Add([]byte(s.Keys[0]))
	}
	x := `"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"`
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"keys":[]}`,
		`{"crv":"Ed25519","kty":"OKP",` + x + `}`,
		`{"alg":"EdDSA","crv":"Ed25519","kty":"OKP",` + x + `}`,
		`{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","X":"A",` + x + `}`,
		`{"alg":"Ed25519","alg":"Ed25519","crv":"Ed25519","kty":"OKP",` + x + `}`,
		`{"alg":"Ed25519","crv":"Ed25519","kid":"\u00e9\ud800","kty":"OKP",` + x + `}`,
		`{"alg":"Ed25519","crv":"Ed25519","kty":"OKP","x":"AAAA"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := ParseJWK(data)
		if err != nil {
			if e := (*Error)(nil); !errors.As(err, &e) || e.Code != CodeInvalidKey {
				t.Fatalf("error outside CodeInvalidKey: %v", err)
			}
			if j != (JWK{}) {
				t.Fatalf("error with a key: %+v", j)
			}
			return
		}
		if _, err := j.PublicKey(); err != nil {
			t.Fatalf("accepted an unusable key: %v", err)
		}
		b, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		j2, err := ParseJWK(b)
		if err != nil || j2 != j {
			t.Fatalf("round trip %s: %+v %v, want %+v", b, j2, err, j)
		}
		_, _ = ParseJWKS(data)
	})
}

func FuzzVerifyAuthToken(f *testing.F) {
	raw, v := rawVectors(f), loadVectors(f)
	fx := newAuthFixture(f)
	good, _ := IssueAuthToken(fx.ps, fx.auth)
	res, _ := IssueResourceToken(fx.rs, fx.resource)
	for _, s := range []string{v.Tokens.Auth, v.Tokens.Person, v.Tokens.Resource, v.Tokens.Sub, good, res, "", "..", "e30.e30.", "eyJhbGciOiJub25lIn0.e30."} {
		f.Add(s)
	}
	ps := mustJWKS(f, raw["ps_jwks"]).KeyFunc()
	f.Fuzz(func(t *testing.T, tok string) {
		typ, kid, iss, perr := Peek(tok)
		for _, keys := range []func(string) (ed25519.PublicKey, error){ps, fx.keys} {
			c, err := VerifyAuthToken(tok, vectorClock, keys)
			if (c == nil) == (err == nil) {
				t.Fatalf("claims %v with err %v", c, err)
			}
			if err != nil {
				if e := (*Error)(nil); !errors.As(err, &e) || (e.Code != CodeInvalidJWT && e.Code != CodeExpiredJWT && e.Code != CodeInvalidKey) {
					t.Fatalf("error outside the code set: %v", err)
				}
				continue
			}
			if err := c.check(); err != nil {
				t.Fatalf("accepted claims break a rule: %v", err)
			}
			if c.Exp <= vectorClock.Unix() || c.IAT > vectorClock.Add(MaxIATSkew).Unix() {
				t.Fatalf("accepted outside its time window: %+v", c)
			}
			if perr != nil || typ != TypAuth || kid == "" || iss != c.Iss {
				t.Fatalf("Peek disagrees: %q %q %q %v; claims %+v", typ, kid, iss, perr, c)
			}
			if _, err := IssueAuthToken(fx.ps, *c); err != nil {
				t.Fatalf("accepted claims cannot be issued: %v", err)
			}
		}
		if _, err := VerifyResourceToken(tok, vectorClock, fx.keys); err == nil && typ != TypResource {
			t.Fatalf("resource token accepted with typ %q", typ)
		}
	})
}
