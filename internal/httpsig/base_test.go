package httpsig

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
)

// RFC 9421 Appendix B.1.4, test-key-ed25519.
const rfcEd25519PrivatePEM = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
`
const rfcEd25519PublicPEM = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----
`

// RFC 9421 Appendix B.2.6.
const (
	b26Input = `("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	b26Base  = `"date": Tue, 20 Apr 2021 02:07:55 GMT
"@method": POST
"@path": /foo
"@authority": example.com
"content-type": application/json
"content-length": 18
"@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"`
	b26Signature = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw=="
)

func rfcTestKey(t *testing.T) (ed25519.PrivateKey, ed25519.PublicKey) {
	t.Helper()
	blk, _ := pem.Decode([]byte(rfcEd25519PrivatePEM))
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ = pem.Decode([]byte(rfcEd25519PublicPEM))
	p, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := k.(ed25519.PrivateKey), p.(ed25519.PublicKey)
	if !pub.Equal(priv.Public()) {
		t.Fatal("B.1.4 public key does not match its private key")
	}
	return priv, pub
}

// The RFC 9421 Appendix B.2 test request.
func rfcTestRequest(t *testing.T) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", "http://example.com/foo?param=Value&Pet=dog", strings.NewReader(`{"hello": "world"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Date", "Tue, 20 Apr 2021 02:07:55 GMT")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Digest", "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:")
	req.Header.Set("Content-Length", "18")
	return req
}

func TestSignatureBaseRFC9421B26(t *testing.T) {
	priv, pub := rfcTestKey(t)
	base, err := SignatureBase(rfcTestRequest(t), b26Input)
	if err != nil {
		t.Fatal(err)
	}
	if base != b26Base {
		t.Fatalf("signature base:\n%s\nwant:\n%s", base, b26Base)
	}
	sig := ed25519.Sign(priv, []byte(base))
	if got := base64.StdEncoding.EncodeToString(sig); got != b26Signature {
		t.Fatalf("signature %s, want %s", got, b26Signature)
	}
	want, _ := base64.StdEncoding.DecodeString(b26Signature)
	if !ed25519.Verify(pub, []byte(b26Base), want) {
		t.Fatal("RFC signature does not verify")
	}
}

func TestSignatureBaseDerivedComponents(t *testing.T) {
	req := rfcTestRequest(t)
	base, err := SignatureBase(req, `("@target-uri" "@scheme" "@request-target" "@query");created=1`)
	if err != nil {
		t.Fatal(err)
	}
	want := `"@target-uri": http://example.com/foo?param=Value&Pet=dog
"@scheme": http
"@request-target": /foo?param=Value&Pet=dog
"@query": ?param=Value&Pet=dog
"@signature-params": ("@target-uri" "@scheme" "@request-target" "@query");created=1`
	if base != want {
		t.Fatalf("got\n%s\nwant\n%s", base, want)
	}
}

func TestSignatureBaseRejects(t *testing.T) {
	for _, in := range []string{
		`("x-missing");created=1`,
		`("@method" "@method");created=1`,
		`("@signature-params");created=1`,
		`("@unknown");created=1`,
		`("Date");created=1`,
		`("date";sf);created=1`,
		`(date);created=1`,
		`"@method"`,
		`(`,
	} {
		if _, err := SignatureBase(rfcTestRequest(t), in); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}

func TestAuthorityDefaultPort(t *testing.T) {
	for u, want := range map[string]string{
		"https://Example.COM:443/x": "example.com",
		"http://example.com:80/x":   "example.com",
		"https://example.com:8443/": "example.com:8443",
		"http://[::1]:80/":          "[::1]",
	} {
		req, _ := http.NewRequest("GET", u, nil)
		if got := authority(req); got != want {
			t.Errorf("%s: %s, want %s", u, got, want)
		}
	}
}

func TestErrorHeader(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{&Error{Code: CodeClockSkew}, "error=clock_skew"},
		{&Error{Code: CodeInvalidSignature, Detail: "x"}, "error=invalid_signature"},
		{&Error{Code: CodeInvalidInput, RequiredInput: RequiredComponents(true)},
			`error=invalid_input, required_input=("@method" "@authority" "@path" "signature-key" "content-digest" "content-type")`},
		{&Error{Code: "Bad Code"}, "error=invalid_signature"},
	} {
		if got := c.e.Header(); got != c.want {
			t.Errorf("%v: %s, want %s", c.e, got, c.want)
		}
	}
}
