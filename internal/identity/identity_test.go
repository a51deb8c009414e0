package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

type vectors struct {
	APJWKS         JWKS   `json:"ap_jwks"`
	ParentAgentJWK JWK    `json:"parent_agent_jwk"`
	ParentAgentJKT string `json:"parent_agent_jkt"`
	SubagentJWK    JWK    `json:"subagent_jwk"`
	SubagentJKT    string `json:"subagent_jkt"`
	PSJWKS         JWKS   `json:"ps_jwks"`
	ResourceJWKS   JWKS   `json:"resource_jwks"`
	Tokens         struct {
		Parent   string `json:"agent_token_parent"`
		Sub      string `json:"agent_token_subagent"`
		Person   string `json:"person_token_for_subagent"`
		Auth     string `json:"auth_token_for_subagent"`
		Resource string `json:"resource_token"`
	} `json:"tokens"`
}

// vectorClock is the vectors' created / iat.
var vectorClock = time.Unix(1730217600, 0)

func loadVectors(t testing.TB) vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func jwksLookup(s JWKS) func(string) (ed25519.PublicKey, error) {
	return func(kid string) (ed25519.PublicKey, error) {
		for _, k := range s.Keys {
			if k.KID == kid {
				return k.PublicKey()
			}
		}
		return nil, errors.New("unknown kid")
	}
}

// rfc8037A1 is the RFC 8037 Appendix A.1 Ed25519 key (the vectors' parent
// agent key).
func rfc8037A1(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	d, err := b64.DecodeString("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(d)
}

func labelKey(label string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte(label))
	return ed25519.NewKeyFromSeed(s[:])
}

func wantCode(t *testing.T, err error, c Code) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != c {
		t.Fatalf("err = %v, want code %s", err, c)
	}
}

func TestThumbprintRFC8037(t *testing.T) {
	priv := rfc8037A1(t)
	j := PublicJWK(priv.Public().(ed25519.PublicKey), "")
	if j.X != "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" {
		t.Fatalf("A.1 x = %s", j.X)
	}
	if got := Thumbprint(j); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("A.3 thumbprint = %s", got)
	}
	v := loadVectors(t)
	if j != v.ParentAgentJWK || Thumbprint(v.ParentAgentJWK) != v.ParentAgentJKT {
		t.Fatal("vectors' parent jwk / jkt differ from RFC 8037 A.1 / A.3")
	}
	if Thumbprint(v.SubagentJWK) != v.SubagentJKT {
		t.Fatal("sub-agent jkt")
	}
	// kid and alg are not thumbprint members.
	if Thumbprint(PublicJWK(j.mustKey(t), "k")) != v.ParentAgentJKT {
		t.Fatal("thumbprint depends on kid")
	}
}

func (j JWK) mustKey(t testing.TB) ed25519.PublicKey {
	k, err := j.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestVectorsVerify(t *testing.T) {
	v := loadVectors(t)
	keys := jwksLookup(v.APJWKS)
	p, err := VerifyAgentToken(v.Tokens.Parent, vectorClock, keys)
	if err != nil {
		t.Fatalf("parent: %v", err)
	}
	s, err := VerifyAgentToken(v.Tokens.Sub, vectorClock, keys)
	if err != nil {
		t.Fatalf("sub-agent: %v", err)
	}
	if p.Cnf.JWK != v.ParentAgentJWK || s.Cnf.JWK != v.SubagentJWK {
		t.Fatal("cnf.jwk differs from the vectors' keys")
	}
	if p.ParentAgent != "" || s.ParentAgent != p.Sub || s.Iss != p.Iss || s.PS != p.PS || s.Exp > p.Exp {
		t.Fatalf("lineage: parent %+v sub %+v", p, s)
	}
	if s.Sub != "aauth:planner.7f3c+search1@agent.example" {
		t.Fatalf("sub = %s", s.Sub)
	}
	// The person token is not an agent token.
	_, err = VerifyAgentToken(v.Tokens.Person, vectorClock, func(string) (ed25519.PublicKey, error) {
		return v.APJWKS.Keys[0].PublicKey()
	})
	wantCode(t, err, CodeInvalidJWT)
}

// TestVectorReissue: the vectors' AP private key is not published (its seed
// label is not given), so the signature segment cannot be reproduced; the
// signing input (header and payload, sorted keys) is reproduced byte for
// byte, and Ed25519 being deterministic, the whole token is reproduced under
// any fixed key.
func TestVectorReissue(t *testing.T) {
	v := loadVectors(t)
	keys := jwksLookup(v.APJWKS)
	p, _ := VerifyAgentToken(v.Tokens.Parent, vectorClock, keys)
	s, _ := VerifyAgentToken(v.Tokens.Sub, vectorClock, keys)
	if p == nil || s == nil {
		t.Fatal("vectors do not verify")
	}
	key := Key{KID: "ap-key-1", Private: labelKey("test ap key")}
	pt, err := IssueAgentToken(key, *p)
	if err != nil {
		t.Fatal(err)
	}
	sub := *s
	sub.ParentAgent, sub.PS = "", "" // filled from the parent
	st, err := IssueSubAgentToken(key, *p, sub, DraftClaimsOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{{pt, v.Tokens.Parent}, {st, v.Tokens.Sub}} {
		if signingInput(c.got) != signingInput(c.want) {
			t.Fatalf("signing input\n got %s\nwant %s", signingInput(c.got), signingInput(c.want))
		}
	}
	again, _ := IssueAgentToken(key, *p)
	if again != pt {
		t.Fatal("issuance is not deterministic")
	}
	pub := key.Private.Public().(ed25519.PublicKey)
	if _, err := VerifyAgentToken(pt, vectorClock, func(string) (ed25519.PublicKey, error) { return pub, nil }); err != nil {
		t.Fatal(err)
	}
}

func signingInput(tok string) string { return tok[:strings.LastIndexByte(tok, '.')] }

func TestVectorSingleByteChanges(t *testing.T) {
	v := loadVectors(t)
	keys := jwksLookup(v.APJWKS)
	for name, tok := range map[string]string{"parent": v.Tokens.Parent, "sub": v.Tokens.Sub} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			refuseEveryByteChange(t, tok, func(m string) error {
				_, err := VerifyAgentToken(m, vectorClock, keys)
				return err
			})
		})
	}
}

// refuseEveryByteChange checks that verify accepts tok and refuses every
// substitution, deletion and insertion of one byte.
func refuseEveryByteChange(t *testing.T, tok string, verify func(string) error) {
	t.Helper()
	if err := verify(tok); err != nil {
		t.Fatalf("unchanged token: %v", err)
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		for b := 0; b < 256; b++ {
			if byte(b) == tok[i] {
				continue
			}
			m := tok[:i] + string([]byte{byte(b)}) + tok[i+1:]
			if verify(m) == nil {
				t.Fatalf("byte %d -> %#x accepted", i, b)
			}
			n++
		}
		if verify(tok[:i]+tok[i+1:]) == nil {
			t.Fatalf("deleting byte %d accepted", i)
		}
		if verify(tok[:i]+"A"+tok[i:]) == nil {
			t.Fatalf("inserting at %d accepted", i)
		}
	}
	t.Logf("%d substitutions rejected", n)
}

// fixture is a parent agent (RFC 8037 A.1 key) under an AP key.
type fixture struct {
	ap     Key
	keys   func(string) (ed25519.PublicKey, error)
	parent AgentClaims
	child  AgentClaims
}

func newFixture(t testing.TB) fixture {
	ap := Key{KID: "ap-key-1", Private: labelKey("ap")}
	pub := ap.Private.Public().(ed25519.PublicKey)
	iat := vectorClock.Unix()
	parent := AgentClaims{
		Cnf: Confirmation{JWK: PublicJWK(rfc8037A1(t).Public().(ed25519.PublicKey), "")},
		DWK: DWK, Exp: iat + 3600, IAT: iat, Iss: "https://agent.example", JTI: "p1",
		PS: "https://ps.example", Sub: "aauth:planner@agent.example",
	}
	child := AgentClaims{
		Cnf: Confirmation{JWK: PublicJWK(labelKey("child").Public().(ed25519.PublicKey), "")},
		DWK: DWK, Exp: iat + 1800, IAT: iat, Iss: parent.Iss, JTI: "c1",
		Sub: "aauth:planner+search1@agent.example",
	}
	return fixture{ap: ap, keys: func(kid string) (ed25519.PublicKey, error) {
		if kid != ap.KID {
			return nil, errors.New("unknown kid")
		}
		return pub, nil
	}, parent: parent, child: child}
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t)
	tok, err := IssueAgentToken(f.ap, f.parent)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyAgentToken(tok, vectorClock, f.keys)
	if err != nil || *got != f.parent {
		t.Fatalf("got %+v, %v", got, err)
	}
	st, err := IssueSubAgentToken(f.ap, f.parent, f.child)
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyAgentToken(st, vectorClock, f.keys)
	if err != nil {
		t.Fatal(err)
	}
	if c.ParentAgent != f.parent.Sub || c.Act == nil || c.Act.Agent != f.parent.Sub || c.PS != f.parent.PS {
		t.Fatalf("sub-agent claims %+v", c)
	}
}

func TestExpiry(t *testing.T) {
	f := newFixture(t)
	tok, _ := IssueAgentToken(f.ap, f.parent)
	exp := time.Unix(f.parent.Exp, 0)
	if _, err := VerifyAgentToken(tok, exp.Add(-time.Second), f.keys); err != nil {
		t.Fatalf("one second before exp: %v", err)
	}
	_, err := VerifyAgentToken(tok, exp, f.keys)
	wantCode(t, err, CodeExpiredJWT)
	_, err = VerifyAgentToken(tok, exp.Add(time.Second), f.keys)
	wantCode(t, err, CodeExpiredJWT)
	if !errors.Is(err, &Error{Code: CodeExpiredJWT}) {
		t.Fatal("errors.Is by code")
	}
	_, err = VerifyAgentToken(tok, vectorClock.Add(-MaxIATSkew-time.Second), f.keys)
	wantCode(t, err, CodeInvalidJWT) // iat in the future
}

func TestIssueRefusals(t *testing.T) {
	f := newFixture(t)
	for name, mod := range map[string]func(*AgentClaims){
		"exp equals iat":      func(c *AgentClaims) { c.Exp = c.IAT },
		"exp before iat":      func(c *AgentClaims) { c.Exp = c.IAT - 1 },
		"over 24h":            func(c *AgentClaims) { c.Exp = c.IAT + 24*3600 + 1 },
		"plus in top-level":   func(c *AgentClaims) { c.Sub = "aauth:plan+ner@agent.example" },
		"sub not aauth":       func(c *AgentClaims) { c.Sub = "planner@agent.example" },
		"sub no domain":       func(c *AgentClaims) { c.Sub = "aauth:planner@" },
		"dwk":                 func(c *AgentClaims) { c.DWK = "aauth-person.json" },
		"no iss":              func(c *AgentClaims) { c.Iss = "" },
		"no jti":              func(c *AgentClaims) { c.JTI = "" },
		"parent_agent set":    func(c *AgentClaims) { c.ParentAgent = "aauth:x@agent.example" },
		"act set":             func(c *AgentClaims) { c.Act = &Actor{Agent: "aauth:x@agent.example"} },
		"cnf jwk without alg": func(c *AgentClaims) { c.Cnf.JWK.Alg = "" },
		"cnf jwk EdDSA":       func(c *AgentClaims) { c.Cnf.JWK.Alg = "EdDSA" },
		"cnf jwk short x":     func(c *AgentClaims) { c.Cnf.JWK.X = "AAAA" },
	} {
		c := f.parent
		mod(&c)
		if tok, err := IssueAgentToken(f.ap, c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
	c := f.parent
	c.Exp = c.IAT + 24*3600
	if _, err := IssueAgentToken(f.ap, c); err != nil {
		t.Fatalf("exactly 24h: %v", err)
	}
	if _, err := IssueAgentToken(Key{Private: f.ap.Private}, f.parent); err == nil {
		t.Fatal("key without kid")
	}
}

func TestSubAgentRules(t *testing.T) {
	f := newFixture(t)
	for name, mod := range map[string]func(*AgentClaims){
		"exp after parent":     func(c *AgentClaims) { c.Exp = f.parent.Exp + 1 },
		"not parent-local+":    func(c *AgentClaims) { c.Sub = "aauth:other+search1@agent.example" },
		"no plus":              func(c *AgentClaims) { c.Sub = "aauth:plannersearch1@agent.example" },
		"empty discriminator":  func(c *AgentClaims) { c.Sub = "aauth:planner+@agent.example" },
		"other domain":         func(c *AgentClaims) { c.Sub = "aauth:planner+search1@evil.example" },
		"iss differs":          func(c *AgentClaims) { c.Iss = "https://other.example" },
		"ps differs":           func(c *AgentClaims) { c.PS = "https://other-ps.example" },
		"parent_agent differs": func(c *AgentClaims) { c.ParentAgent = "aauth:other@agent.example" },
		"act differs":          func(c *AgentClaims) { c.Act = &Actor{Agent: "aauth:other@agent.example"} },
	} {
		c := f.child
		mod(&c)
		if tok, err := IssueSubAgentToken(f.ap, f.parent, c); err == nil {
			t.Errorf("%s: issued %s", name, tok)
		}
	}
	c := f.child
	c.Exp = f.parent.Exp
	if _, err := IssueSubAgentToken(f.ap, f.parent, c); err != nil {
		t.Fatalf("exp equal to the parent's: %v", err)
	}
	// A sub-agent token is refused through IssueAgentToken.
	c.ParentAgent = f.parent.Sub
	if _, err := IssueAgentToken(f.ap, c); err == nil {
		t.Fatal("IssueAgentToken issued a sub-agent token")
	}
}

func TestSingleLevel(t *testing.T) {
	f := newFixture(t)
	child := f.child
	child.ParentAgent, child.PS, child.Act = f.parent.Sub, f.parent.PS, &Actor{Agent: f.parent.Sub}
	grand := f.child
	grand.Sub, grand.JTI = "aauth:planner+search1+deep@agent.example", "g1"
	_, err := IssueSubAgentToken(f.ap, child, grand, SingleLevel())
	wantCode(t, err, CodeInvalidJWT)
	tok, err := IssueSubAgentToken(f.ap, child, grand)
	if err != nil {
		t.Fatalf("deeper lineage outside the aauth profile: %v", err)
	}
	g, err := VerifyAgentToken(tok, vectorClock, f.keys)
	if err != nil || g.ParentAgent != child.Sub {
		t.Fatalf("grandchild names its immediate parent: %+v %v", g, err)
	}
	if _, err := IssueSubAgentToken(f.ap, f.parent, f.child, SingleLevel()); err != nil {
		t.Fatalf("child of a top-level agent: %v", err)
	}
}

// forge signs arbitrary header and payload JSON with the fixture's AP key.
func forge(f fixture, hdr, payload string) string {
	in := b64.EncodeToString([]byte(hdr)) + "." + b64.EncodeToString([]byte(payload))
	return in + "." + b64.EncodeToString(ed25519.Sign(f.ap.Private, []byte(in)))
}

func TestVerifyRejects(t *testing.T) {
	f := newFixture(t)
	good, _ := IssueAgentToken(f.ap, f.parent)
	parts := strings.Split(good, ".")
	pl, _ := b64.DecodeString(parts[1])
	payload := string(pl)
	okHdr := `{"alg":"Ed25519","kid":"ap-key-1","typ":"aa-agent+jwt"}`
	if _, err := VerifyAgentToken(forge(f, okHdr, payload), vectorClock, f.keys); err != nil {
		t.Fatalf("forge baseline: %v", err)
	}
	noAlgJWK := strings.Replace(payload, `"alg":"Ed25519",`, "", 1)
	plus := strings.Replace(payload, "planner@", "plan+ner@", 1)
	for _, c := range []struct {
		name string
		tok  string
		code Code
	}{
		{"alg none", b64.EncodeToString([]byte(`{"alg":"none","kid":"ap-key-1","typ":"aa-agent+jwt"}`)) + "." + parts[1] + ".", CodeInvalidJWT},
		{"alg HS256", forge(f, `{"alg":"HS256","kid":"ap-key-1","typ":"aa-agent+jwt"}`, payload), CodeInvalidJWT},
		{"alg EdDSA", forge(f, `{"alg":"EdDSA","kid":"ap-key-1","typ":"aa-agent+jwt"}`, payload), CodeInvalidJWT},
		{"typ", forge(f, `{"alg":"Ed25519","kid":"ap-key-1","typ":"JWT"}`, payload), CodeInvalidJWT},
		{"no kid", forge(f, `{"alg":"Ed25519","typ":"aa-agent+jwt"}`, payload), CodeInvalidJWT},
		{"unknown kid", forge(f, `{"alg":"Ed25519","kid":"other","typ":"aa-agent+jwt"}`, payload), CodeInvalidKey},
		{"header case", forge(f, `{"alg":"Ed25519","ALG":"none","kid":"ap-key-1","typ":"aa-agent+jwt"}`, payload), CodeInvalidJWT},
		{"header duplicate", forge(f, `{"alg":"Ed25519","alg":"Ed25519","kid":"ap-key-1","typ":"aa-agent+jwt"}`, payload), CodeInvalidJWT},
		{"header not object", forge(f, `["alg"]`, payload), CodeInvalidJWT},
		{"cnf jwk without alg", forge(f, okHdr, noAlgJWK), CodeInvalidKey},
		{"plus in top-level", forge(f, okHdr, plus), CodeInvalidJWT},
		{"payload trailing", forge(f, okHdr, payload+"{}"), CodeInvalidJWT},
		{"exp string", forge(f, okHdr, strings.Replace(payload, `"exp":`, `"exp":"1"`+`,"x":`, 1)), CodeInvalidJWT},
		{"other signer", parts[0] + "." + parts[1] + "." + b64.EncodeToString(ed25519.Sign(labelKey("x"), []byte(parts[0]+"."+parts[1]))), CodeInvalidJWT},
		{"two parts", parts[0] + "." + parts[1], CodeInvalidJWT},
		{"four parts", good + ".x", CodeInvalidJWT},
		{"padded", good + "=", CodeInvalidJWT},
		{"empty", "", CodeInvalidJWT},
	} {
		_, err := VerifyAgentToken(c.tok, vectorClock, f.keys)
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("%s: err = %v, want %s", c.name, err, c.code)
		}
	}
}

func FuzzVerifyAgentToken(f *testing.F) {
	v := loadVectors(f)
	fx := newFixture(f)
	good, _ := IssueAgentToken(fx.ap, fx.parent)
	sub, _ := IssueSubAgentToken(fx.ap, fx.parent, fx.child)
	for _, s := range []string{v.Tokens.Parent, v.Tokens.Sub, v.Tokens.Person, good, sub, "", ".", "..", "a.b.c", "e30.e30.", "eyJhbGciOiJub25lIn0.e30."} {
		f.Add(s)
	}
	keys := jwksLookup(v.APJWKS)
	f.Fuzz(func(t *testing.T, tok string) {
		for _, k := range []func(string) (ed25519.PublicKey, error){keys, fx.keys} {
			c, err := VerifyAgentToken(tok, vectorClock, k)
			if (c == nil) == (err == nil) {
				t.Fatalf("claims %v with err %v", c, err)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || (e.Code != CodeInvalidJWT && e.Code != CodeExpiredJWT && e.Code != CodeInvalidKey) {
					t.Fatalf("error outside the code set: %v", err)
				}
			}
		}
	})
}
