package httpsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// vectorNow is the clock of testdata/vectors.json.
var vectorNow = time.Unix(1730217600, 0)

type vectorRequest struct {
	ContentDigest  string `json:"Content-Digest"`
	ContentType    string `json:"Content-Type"`
	Signature      string `json:"Signature"`
	SignatureInput string `json:"Signature-Input"`
	SignatureKey   string `json:"Signature-Key"`
	Body           string `json:"body"`
	RequestLine    string `json:"request_line"`
	SignatureBase  string `json:"signature_base"`
}

type vectorFile struct {
	ParentRequest   vectorRequest     `json:"http_sig_parent_token_request"`
	SubagentRequest vectorRequest     `json:"http_sig_subagent_resource_call"`
	ParentJWK       map[string]string `json:"parent_agent_jwk"`
	SubagentJWK     map[string]string `json:"subagent_jwk"`
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// parts of a request, so tests can change one byte of any of them.
type reqParts struct {
	method, authority, path, body string
	headers                       [][2]string
}

func (p reqParts) build() *http.Request {
	var body io.Reader
	if p.body != "" {
		body = strings.NewReader(p.body)
	}
	req, err := http.NewRequest("GET", "https://placeholder/", body)
	if err != nil {
		panic(err)
	}
	req.Method = p.method
	req.Host = p.authority
	req.URL.Host = p.authority
	req.URL.Path = p.path
	req.URL.RawPath = ""
	for _, h := range p.headers {
		req.Header.Add(h[0], h[1])
	}
	return req
}

func (v vectorRequest) parts() reqParts {
	method, target, _ := strings.Cut(v.RequestLine, " ")
	rest := strings.TrimPrefix(target, "https://")
	authority, path, _ := strings.Cut(rest, "/")
	p := reqParts{method: method, authority: authority, path: "/" + path, body: v.Body}
	for _, h := range [][2]string{
		{"Content-Digest", v.ContentDigest}, {"Content-Type", v.ContentType},
		{"Signature-Input", v.SignatureInput}, {"Signature", v.Signature}, {"Signature-Key", v.SignatureKey},
	} {
		if h[1] != "" {
			p.headers = append(p.headers, h)
		}
	}
	return p
}

// insecureKeyFromUnverifiedJWT reads cnf.jwk from a JWT payload WITHOUT
// verifying the JWT. Tests only: JWT verification belongs to another package.
func insecureKeyFromUnverifiedJWT(sk SignatureKey) (ed25519.PublicKey, error) {
	parts := strings.Split(sk.JWT, ".")
	if len(parts) != 3 {
		return nil, &Error{Code: CodeInvalidJWT, Detail: "not three parts"}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, &Error{Code: CodeInvalidJWT, Detail: "payload encoding"}
	}
	var claims struct {
		Cnf struct {
			JWK struct {
				Kty, Crv, X string
			} `json:"jwk"`
		} `json:"cnf"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, &Error{Code: CodeInvalidJWT, Detail: "payload json"}
	}
	jwk := claims.Cnf.JWK
	x, err := base64.RawURLEncoding.DecodeString(jwk.X)
	if err != nil || jwk.Kty != "OKP" || jwk.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
		return nil, &Error{Code: CodeInvalidKey, Detail: "cnf.jwk is not an Ed25519 key"}
	}
	return ed25519.PublicKey(x), nil
}

func codeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func jwkKey(t *testing.T, jwk map[string]string) ed25519.PublicKey {
	x, err := base64.RawURLEncoding.DecodeString(jwk["x"])
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestVectorsVerify(t *testing.T) {
	v := loadVectors(t)
	for name, c := range map[string]struct {
		r   vectorRequest
		key ed25519.PublicKey
	}{
		"http_sig_parent_token_request":   {v.ParentRequest, jwkKey(t, v.ParentJWK)},
		"http_sig_subagent_resource_call": {v.SubagentRequest, jwkKey(t, v.SubagentJWK)},
	} {
		t.Run(name, func(t *testing.T) {
			req := c.r.parts().build()
			member := strings.TrimPrefix(c.r.SignatureInput, "sig=")
			base, err := SignatureBase(req, member)
			if err != nil {
				t.Fatal(err)
			}
			if base != c.r.SignatureBase {
				t.Fatalf("signature base\n%s\nwant\n%s", base, c.r.SignatureBase)
			}
			got, err := Verify(req, vectorNow, insecureKeyFromUnverifiedJWT)
			if err != nil {
				t.Fatal(err)
			}
			if !got.PublicKey.Equal(c.key) {
				t.Fatal("verified with a key other than the vector's")
			}
			if got.Label != "sig" || got.SignatureKey.Scheme != "jwt" || !got.Created.Equal(vectorNow) {
				t.Fatalf("verified = %+v", got)
			}
			// The body is still there for the handler.
			var b []byte
			if req.Body != nil {
				b, _ = io.ReadAll(req.Body)
			}
			if string(b) != c.r.Body {
				t.Fatal("body not restored")
			}
			// The wrong key is refused.
			_, err = Verify(c.r.parts().build(), vectorNow, func(SignatureKey) (ed25519.PublicKey, error) {
				other := jwkKey(t, v.ParentJWK)
				if other.Equal(c.key) {
					other = jwkKey(t, v.SubagentJWK)
				}
				return other, nil
			})
			if codeOf(err) != CodeInvalidSignature {
				t.Fatalf("wrong key: %v", err)
			}
		})
	}
}

// Every single-byte change of a signed part is refused, with the code that
// names what went wrong.
func TestVectorsRejectEverySingleByteChange(t *testing.T) {
	v := loadVectors(t)
	for name, r := range map[string]vectorRequest{"parent": v.ParentRequest, "subagent": v.SubagentRequest} {
		base := r.parts()
		mutate := func(s string, i int) string {
			b := []byte(s)
			b[i] ^= 0x01
			return string(b)
		}
		check := func(t *testing.T, what string, p reqParts, allowed ...Code) {
			t.Helper()
			_, err := Verify(p.build(), vectorNow, insecureKeyFromUnverifiedJWT)
			if err == nil {
				t.Fatalf("%s: accepted", what)
			}
			if !slices.Contains(allowed, codeOf(err)) {
				t.Fatalf("%s: %v, want one of %v", what, err, allowed)
			}
		}
		t.Run(name, func(t *testing.T) {
			for i := range base.method {
				p := base
				p.method = mutate(base.method, i)
				check(t, "method", p, CodeInvalidSignature)
			}
			for i := range base.authority {
				p := base
				p.authority = mutate(base.authority, i)
				check(t, "authority", p, CodeInvalidSignature)
			}
			for i := range base.path {
				p := base
				p.path = mutate(base.path, i)
				check(t, "path", p, CodeInvalidSignature)
			}
			for i := range base.body {
				p := base
				p.body = mutate(base.body, i)
				check(t, "body", p, CodeInvalidSignature)
			}
			for h := range base.headers {
				name, val := base.headers[h][0], base.headers[h][1]
				// What a change of each header may legitimately be reported as.
				allowed := map[string][]Code{
					"Content-Digest": {CodeInvalidSignature},
					"Content-Type":   {CodeInvalidSignature},
					"Signature":      {CodeInvalidSignature},
					// A changed label, name or parameter: unmatched label,
					// missing component, future created, or a bad signature.
					"Signature-Input": {CodeInvalidSignature, CodeInvalidInput, CodeClockSkew},
					// A changed scheme, JWT payload or JWT signature.
					"Signature-Key": {CodeInvalidSignature, CodeInvalidKey, CodeUnsupportedScheme, CodeInvalidJWT},
				}[name]
				for i := range val {
					p := base
					p.headers = slices.Clone(base.headers)
					p.headers[h] = [2]string{name, mutate(val, i)}
					check(t, name, p, allowed...)
				}
			}
		})
	}
}

func testJWT(t *testing.T, pub ed25519.PublicKey) string {
	t.Helper()
	enc := base64.RawURLEncoding
	claims, _ := json.Marshal(map[string]any{"cnf": map[string]any{"jwk": map[string]string{
		"kty": "OKP", "crv": "Ed25519", "x": enc.EncodeToString(pub)}}})
	return enc.EncodeToString([]byte(`{"alg":"Ed25519","typ":"aa-agent+jwt"}`)) + "." +
		enc.EncodeToString(claims) + "." + enc.EncodeToString(make([]byte, 64))
}

func testKey(label string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(label))
	return ed25519.NewKeyFromSeed(seed[:])
}

func TestSignVerifyRoundTrip(t *testing.T) {
	key := testKey("round-trip")
	jwt := testJWT(t, key.Public().(ed25519.PublicKey))
	now := time.Unix(1800000000, 0)
	for _, body := range []string{"", `{"a":1}`} {
		var rb io.Reader
		if body != "" {
			rb = strings.NewReader(body)
		}
		req, _ := http.NewRequest("POST", "https://ps.example/auth-token", rb)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if err := Sign(req, key, Params{Created: now, JWT: jwt, Nonce: "n-1"}); err != nil {
			t.Fatal(err)
		}
		in := req.Header.Get(HeaderSignatureInput)
		wantIn := `sig=("@method" "@authority" "@path" "signature-key");created=1800000000;nonce="n-1"`
		if body != "" {
			wantIn = `sig=("@method" "@authority" "@path" "signature-key" "content-digest" "content-type");created=1800000000;nonce="n-1"`
			if got, want := req.Header.Get(HeaderContentDigest), ContentDigest([]byte(body)); got != want {
				t.Fatalf("Content-Digest %s, want %s", got, want)
			}
		}
		if in != wantIn {
			t.Fatalf("Signature-Input %s, want %s", in, wantIn)
		}
		if got := req.Header.Get(HeaderSignatureKey); got != `sig=jwt;jwt="`+jwt+`"` {
			t.Fatalf("Signature-Key %s", got)
		}
		// The body survives signing, so the request can still be sent.
		if body != "" {
			b, _ := io.ReadAll(req.Body)
			if string(b) != body {
				t.Fatal("Sign consumed the body")
			}
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		got, err := Verify(req, now.Add(30*time.Second), insecureKeyFromUnverifiedJWT)
		if err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if got.SignatureKey.JWT != jwt || len(got.Covered) != strings.Count(in, `"`)/2-1 || got.Nonce != "n-1" {
			t.Fatalf("verified = %+v", got)
		}
	}
}

func TestSignRequiresContentTypeWithBody(t *testing.T) {
	req, _ := http.NewRequest("POST", "https://ps.example/x", strings.NewReader("x"))
	if err := Sign(req, testKey("k"), Params{Created: time.Unix(1, 0), JWT: "a.b.c"}); err == nil {
		t.Fatal("signed a body without Content-Type")
	}
	if err := Sign(req, testKey("k"), Params{JWT: "a.b.c"}); err == nil {
		t.Fatal("signed without created")
	}
}

func signedAt(t *testing.T, created time.Time) *http.Request {
	key := testKey("clock")
	req, _ := http.NewRequest("GET", "https://resource.example/api", nil)
	if err := Sign(req, key, Params{Created: created, JWT: testJWT(t, key.Public().(ed25519.PublicKey))}); err != nil {
		t.Fatal(err)
	}
	return req
}

func TestClockWindow(t *testing.T) {
	now := time.Unix(1800000000, 0)
	for _, c := range []struct {
		offset time.Duration
		want   Code
	}{
		{0, ""},
		{60 * time.Second, ""},
		{-60 * time.Second, ""},
		// created ahead of the verifier: the sender's clock (draft: clock_skew).
		{61 * time.Second, CodeClockSkew},
		{time.Hour, CodeClockSkew},
		// created too old: stale or replayed (draft: invalid_signature).
		{-61 * time.Second, CodeInvalidSignature},
		{-time.Hour, CodeInvalidSignature},
	} {
		_, err := Verify(signedAt(t, now.Add(c.offset)), now, insecureKeyFromUnverifiedJWT)
		if codeOf(err) != c.want || (c.want == "") != (err == nil) {
			t.Errorf("created %v from now: %v, want %q", c.offset, err, c.want)
		}
	}
}

func TestMissingComponents(t *testing.T) {
	key := testKey("missing")
	jwt := testJWT(t, key.Public().(ed25519.PublicKey))
	now := time.Unix(1800000000, 0)
	for _, c := range []struct {
		components []string
		body       string
	}{
		{[]string{"@method", "@authority", "@path"}, ""},
		{[]string{"@method", "@authority", "signature-key"}, ""},
		{[]string{"@authority", "@path", "signature-key"}, ""},
		{[]string{"@method", "@path", "signature-key"}, ""},
		{[]string{"@method", "@authority", "@path", "signature-key"}, "{}"},
		{[]string{"@method", "@authority", "@path", "signature-key", "content-digest"}, "{}"},
		{[]string{"@method", "@authority", "@path", "signature-key", "content-type"}, "{}"},
	} {
		var rb io.Reader
		if c.body != "" {
			rb = strings.NewReader(c.body)
		}
		req, _ := http.NewRequest("POST", "https://ps.example/x", rb)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderContentDigest, ContentDigest([]byte(c.body)))
		req.Header.Set(HeaderSignatureKey, `sig=jwt;jwt="`+jwt+`"`)
		member := `("` + strings.Join(c.components, `" "`) + `");created=1800000000`
		base, err := SignatureBase(req, member)
		if err != nil {
			t.Fatal(err)
		}
		sig := ed25519.Sign(key, []byte(base))
		req.Header.Set(HeaderSignatureInput, "sig="+member)
		req.Header.Set(HeaderSignature, "sig=:"+base64.StdEncoding.EncodeToString(sig)+":")
		_, err = Verify(req, now, insecureKeyFromUnverifiedJWT)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidInput {
			t.Fatalf("%v: %v, want invalid_input", c.components, err)
		}
		if !strings.HasPrefix(e.Header(), "error=invalid_input, required_input=(") {
			t.Fatalf("header %s", e.Header())
		}
	}
}

func TestVerifyRejectsMalformed(t *testing.T) {
	now := time.Unix(1800000000, 0)
	good := signedAt(t, now)
	for _, c := range []struct {
		header, value string
		want          Code
	}{
		{HeaderSignatureInput, "", CodeInvalidSignature},
		{HeaderSignature, "", CodeInvalidSignature},
		{HeaderSignatureKey, "", CodeInvalidSignature},
		{HeaderSignatureInput, `sig=("@method" "@authority" "@path" "signature-key")`, CodeInvalidSignature},
		{HeaderSignatureInput, `sig=("@method" "@authority" "@path" "signature-key");created=1800000000;alg="rsa-v1_5-sha256"`, CodeUnsupportedAlgorithm},
		{HeaderSignatureInput, `sig=("@method" "@authority" "@path" "signature-key");created=1800000000;expires=1799999999`, CodeInvalidSignature},
		{HeaderSignatureInput, `sig=("@method" "@authority" "@path" "signature-key");created=1800000000;nonce=1`, CodeInvalidSignature},
		{HeaderSignatureInput, `sig=("@method" "@authority" "@path" "signature-key");created=1800000000;nonce=abc`, CodeInvalidSignature},
		{HeaderSignatureInput, `sig="x"`, CodeInvalidSignature},
		{HeaderSignature, `sig=:AAAA:`, CodeInvalidSignature},
		{HeaderSignature, `other=:AAAA:`, CodeInvalidSignature},
		{HeaderSignatureKey, `sig=hwk;kty="OKP"`, CodeUnsupportedScheme},
		{HeaderSignatureKey, `sig=jwt`, CodeInvalidKey},
		{HeaderSignatureKey, `sig=jwt;jwt=`, CodeInvalidKey},
		{HeaderSignatureKey, `other=jwt;jwt="a"`, CodeInvalidSignature},
	} {
		req := good.Clone(t.Context())
		if c.value == "" {
			req.Header.Del(c.header)
		} else {
			req.Header.Set(c.header, c.value)
		}
		if _, err := Verify(req, now, insecureKeyFromUnverifiedJWT); codeOf(err) != c.want {
			t.Errorf("%s: %s: %v, want %s", c.header, c.value, err, c.want)
		}
	}
	// A resolver's plain error is invalid_key; its *Error passes through.
	if _, err := Verify(good.Clone(t.Context()), now, func(SignatureKey) (ed25519.PublicKey, error) {
		return nil, errors.New("no")
	}); codeOf(err) != CodeInvalidKey {
		t.Errorf("plain resolver error: %v", err)
	}
	if _, err := Verify(good.Clone(t.Context()), now, func(SignatureKey) (ed25519.PublicKey, error) {
		return nil, &Error{Code: CodeRevokedJWT}
	}); codeOf(err) != CodeRevokedJWT {
		t.Errorf("resolver *Error: %v", err)
	}
}

// FuzzVerifyHeaders: header parsing never panics, and whatever it rejects is
// rejected with a Signature-Error code.
func FuzzVerifyHeaders(f *testing.F) {
	v := loadVectors(f)
	for _, r := range []vectorRequest{v.ParentRequest, v.SubagentRequest} {
		f.Add(r.SignatureInput, r.Signature, r.SignatureKey, r.ContentDigest)
	}
	f.Add(`sig=("@method");created=1;alg="ed25519";expires=2`, `sig=:AAAA:`, `sig=jwt;jwt="a.b.c"`, `sha-256=:AAAA:`)
	f.Add(`sig=("date";sf);created=1.5`, `sig=?1`, `sig=hwk`, `sha-512=:AA==:`)
	f.Add(`sig=("@method");created=1;nonce="n"`, `sig=:AAAA:`, `sig=jwt;jwt="a.b.c"`, `sha-256=:AAAA:`)
	f.Add(`sig=("@method");created=1;nonce=:AAAA:;nonce=2`, `sig=:AAAA:`, `sig=jwt;jwt="a.b.c"`, ``)
	f.Add(`a=(`, `"`, `sig=jwt;jwt`, `,`)
	f.Fuzz(func(t *testing.T, in, sig, key, digest string) {
		req, _ := http.NewRequest("POST", "https://ps.example/token", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderSignatureInput, in)
		req.Header.Set(HeaderSignature, sig)
		req.Header.Set(HeaderSignatureKey, key)
		req.Header.Set(HeaderContentDigest, digest)
		_, err := Verify(req, vectorNow, insecureKeyFromUnverifiedJWT)
		if err != nil && codeOf(err) == "" {
			t.Fatalf("error without a code: %v", err)
		}
		_, _ = ParseSignatureKey(key, Label)
		_, _ = SignatureBase(req, strings.TrimPrefix(in, "sig="))
	})
}

// FuzzParseSignatureKey: any header value either parses to a jwt-scheme
// member of the asked label with a non-empty JWT, or is refused with an
// *Error; never a panic.
func FuzzParseSignatureKey(f *testing.F) {
	for _, s := range []string{`sig=jwt;jwt="a.b.c"`, `sig=jwt;jwt="a.b.c", other=jwks_uri;id="x"`, `sig=hwk;kty="OKP"`, `sig=jwt`, `sig="x"`, ``, `sig=jwt;jwt=`, "sig=jwt;jwt=\"\x00\""} {
		f.Add(s, "sig")
	}
	f.Fuzz(func(t *testing.T, value, label string) {
		sk, err := ParseSignatureKey(value, label)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if sk.Label != label || sk.Scheme != "jwt" || sk.JWT == "" {
			t.Fatalf("accepted %q as %+v", value, sk)
		}
	})
}

// TestBoundDetail: a detail longer than MaxDetail keeps its first bytes,
// never half a character, and says how long it was.
func TestBoundDetail(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{strings.Repeat("a", MaxDetail), strings.Repeat("a", MaxDetail)},
		{strings.Repeat("a", MaxDetail+1), strings.Repeat("a", MaxDetail) + "… (201 bytes)"},
		{strings.Repeat("a", MaxDetail-1) + "é" + strings.Repeat("a", 1<<20), strings.Repeat("a", MaxDetail-1) + "… (1048777 bytes)"},
	} {
		if got := BoundDetail(tc.in); got != tc.want {
			t.Errorf("BoundDetail(%d bytes) = %q; want %q", len(tc.in), got, tc.want)
		}
	}
}
