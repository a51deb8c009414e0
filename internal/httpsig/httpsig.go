package httpsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/dunglas/httpsfv"
)

// Label is the signature label this package signs under and prefers when
// verifying.
const Label = "sig"

// Window is how far created may be from the verifier's clock, either way.
const Window = 60 * time.Second

// MaxBodyBytes bounds the body Sign and Verify read to compute its digest.
const MaxBodyBytes = 16 << 20

// Header names.
const (
	HeaderSignatureInput = "Signature-Input"
	HeaderSignature      = "Signature"
	HeaderSignatureKey   = "Signature-Key"
	HeaderSignatureError = "Signature-Error"
	HeaderContentDigest  = "Content-Digest"
)

var (
	baseComponents = []string{"@method", "@authority", "@path", "signature-key"}
	bodyComponents = []string{"@method", "@authority", "@path", "signature-key", "content-digest", "content-type"}
)

// RequiredComponents returns the components a request must cover: the body
// ones are added when it has a body.
func RequiredComponents(hasBody bool) []string {
	if hasBody {
		return slices.Clone(bodyComponents)
	}
	return slices.Clone(baseComponents)
}

// Params is what Sign needs besides the key.
type Params struct {
	// Created is the signing time (from the caller's clock); required.
	Created time.Time
	// JWT is presented as Signature-Key: sig=jwt;jwt="...".
	JWT string
	// Nonce is the signature's nonce parameter (RFC 9421 §2.3); "" is 128
	// random bits. It makes two signatures of the same request in the same
	// second differ, so a verifier that refuses a signature it already
	// accepted (Replays) does not refuse the second.
	Nonce string
}

// SignatureKey is the Signature-Key member for the verified label. The JWT is
// not verified here.
type SignatureKey struct {
	Label  string
	Scheme string // "jwt"
	JWT    string
}

// Verified describes a signature that verified.
type Verified struct {
	Label   string
	Covered []string
	Created time.Time
	// Nonce is the nonce parameter, "" when the signer sent none.
	Nonce        string
	SignatureKey SignatureKey
	PublicKey    ed25519.PublicKey
	// statement names what was signed and by whom: SHA-256 over the
	// public key and the signature base (Replays' key).
	statement [sha256.Size]byte
}

// Sign signs req with key: it sets Content-Digest (when there is a body),
// Signature-Key, Signature-Input and Signature. A body needs a Content-Type.
func Sign(req *http.Request, key ed25519.PrivateKey, p Params) error {
	if len(key) != ed25519.PrivateKeySize {
		return errors.New("httpsig: not an Ed25519 private key")
	}
	if p.Created.IsZero() {
		return errors.New("httpsig: Params.Created is required")
	}
	if p.JWT == "" {
		return errors.New("httpsig: Params.JWT is required")
	}
	body, err := takeBody(req)
	if err != nil {
		return err
	}
	components := RequiredComponents(len(body) > 0)
	if len(body) > 0 {
		if req.Header.Get("Content-Type") == "" {
			return errors.New("httpsig: a request with a body needs a Content-Type")
		}
		req.Header.Set(HeaderContentDigest, ContentDigest(body))
	}

	sk := httpsfv.NewDictionary()
	kp := httpsfv.NewParams()
	kp.Add("jwt", p.JWT)
	sk.Add(Label, httpsfv.Item{Value: httpsfv.Token("jwt"), Params: kp})
	skv, err := httpsfv.Marshal(sk)
	if err != nil {
		return fmt.Errorf("httpsig: Signature-Key: %w", err)
	}
	req.Header.Set(HeaderSignatureKey, skv)

	il := httpsfv.InnerList{Params: httpsfv.NewParams()}
	for _, c := range components {
		il.Items = append(il.Items, httpsfv.NewItem(c))
	}
	il.Params.Add("created", p.Created.Unix())
	nonce := p.Nonce
	if nonce == "" {
		nonce = rand.Text()
	}
	il.Params.Add("nonce", nonce)
	base, err := signatureBase(req, components, il)
	if err != nil {
		return err
	}
	sig := ed25519.Sign(key, []byte(base))

	in := httpsfv.NewDictionary()
	in.Add(Label, il)
	inv, err := httpsfv.Marshal(in)
	if err != nil {
		return err
	}
	sd := httpsfv.NewDictionary()
	sd.Add(Label, httpsfv.NewItem(sig))
	sv, err := httpsfv.Marshal(sd)
	if err != nil {
		return err
	}
	req.Header.Set(HeaderSignatureInput, inv)
	req.Header.Set(HeaderSignature, sv)
	return nil
}

// ContentDigest is the RFC 9530 Content-Digest value of body with sha-256.
func ContentDigest(body []byte) string {
	sum := sha256.Sum256(body)
	d := httpsfv.NewDictionary()
	d.Add("sha-256", httpsfv.NewItem(sum[:]))
	s, _ := httpsfv.Marshal(d) // a byte sequence always serializes
	return s
}

// takeBody reads req's body and puts an identical one back.
func takeBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes+1))
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("httpsig: reading body: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("httpsig: body larger than %d bytes", MaxBodyBytes)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	return body, nil
}

// Verify checks req's signature at time now. resolve maps the presented
// Signature-Key to the signer's public key (it is where the JWT gets
// verified); an *Error it returns is passed through, any other error becomes
// invalid_key. Every error Verify returns is an *Error.
func Verify(req *http.Request, now time.Time, resolve func(sigKey SignatureKey) (ed25519.PublicKey, error)) (*Verified, error) {
	inputs := req.Header.Values(HeaderSignatureInput)
	sigs := req.Header.Values(HeaderSignature)
	keys := req.Header.Values(HeaderSignatureKey)
	if len(inputs) == 0 || len(sigs) == 0 || len(keys) == 0 {
		return nil, errorf(CodeInvalidSignature, "missing Signature-Input, Signature or Signature-Key")
	}
	inDict, err := httpsfv.UnmarshalDictionary(inputs)
	if err != nil {
		return nil, errorf(CodeInvalidSignature, "malformed Signature-Input")
	}
	label := Label
	if _, ok := inDict.Get(label); !ok {
		names := inDict.Names()
		if len(names) == 0 {
			return nil, errorf(CodeInvalidSignature, "empty Signature-Input")
		}
		label = names[0]
	}
	m, _ := inDict.Get(label)
	il, ok := m.(httpsfv.InnerList)
	if !ok {
		return nil, errorf(CodeInvalidSignature, "Signature-Input member is not an inner list")
	}
	components, err := componentNames(il)
	if err != nil {
		return nil, errorf(CodeInvalidSignature, err.Error())
	}

	sigDict, err := httpsfv.UnmarshalDictionary(sigs)
	if err != nil {
		return nil, errorf(CodeInvalidSignature, "malformed Signature")
	}
	sm, ok := sigDict.Get(label)
	if !ok {
		return nil, errorf(CodeInvalidSignature, "no Signature for label "+label)
	}
	sitem, ok := sm.(httpsfv.Item)
	if !ok {
		return nil, errorf(CodeInvalidSignature, "Signature member is not an item")
	}
	sig, ok := sitem.Value.([]byte)
	if !ok || len(sig) != ed25519.SignatureSize {
		return nil, errorf(CodeInvalidSignature, "Signature is not a 64-byte byte sequence")
	}

	sigKey, kerr := parseSignatureKey(keys, label)
	if kerr != nil {
		return nil, kerr
	}

	// Parameters: created required, alg (if sent) ed25519, expires
	// honoured, nonce (if sent) a String.
	var created int64
	var nonce string
	haveCreated := false
	for _, name := range il.Params.Names() {
		v, _ := il.Params.Get(name)
		switch name {
		case "created":
			n, ok := v.(int64)
			if !ok {
				return nil, errorf(CodeInvalidSignature, "created is not an integer")
			}
			created, haveCreated = n, true
		case "alg":
			if s, ok := v.(string); !ok || s != "ed25519" {
				return nil, errorf(CodeUnsupportedAlgorithm, "only ed25519 is supported")
			}
		case "expires":
			n, ok := v.(int64)
			if !ok {
				return nil, errorf(CodeInvalidSignature, "expires is not an integer")
			}
			if now.Unix() > n {
				return nil, errorf(CodeInvalidSignature, "signature expired")
			}
		case "nonce":
			s, ok := v.(string)
			if !ok {
				return nil, errorf(CodeInvalidSignature, "nonce is not a string")
			}
			nonce = s
		}
	}
	if !haveCreated {
		return nil, errorf(CodeInvalidSignature, "created is required")
	}

	body, err := takeBody(req)
	if err != nil {
		return nil, errorf(CodeInvalidRequest, err.Error())
	}
	required := RequiredComponents(len(body) > 0)
	for _, r := range required {
		if !slices.Contains(components, r) {
			return nil, &Error{Code: CodeInvalidInput, Detail: "component " + r + " not covered", RequiredInput: required}
		}
	}

	// Window: a created in the future is the sender's clock (clock_skew); one
	// too old is a stale signature (invalid_signature), as the draft says.
	delta := created - now.Unix()
	if delta > int64(Window/time.Second) {
		return nil, errorf(CodeClockSkew, fmt.Sprintf("created is %d s ahead", delta))
	}
	if -delta > int64(Window/time.Second) {
		return nil, errorf(CodeInvalidSignature, fmt.Sprintf("created is %d s old", -delta))
	}

	if slices.Contains(components, "content-digest") {
		if err := checkDigest(req.Header.Values(HeaderContentDigest), body); err != nil {
			return nil, err
		}
	}

	base, err := signatureBase(req, components, il)
	if err != nil {
		return nil, errorf(CodeInvalidSignature, err.Error())
	}

	pub, err := resolve(sigKey)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, e
		}
		return nil, errorf(CodeInvalidKey, err.Error())
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, errorf(CodeInvalidKey, "not an Ed25519 public key")
	}
	if !ed25519.Verify(pub, []byte(base), sig) {
		return nil, errorf(CodeInvalidSignature, "signature does not verify")
	}
	v := &Verified{
		Label:        label,
		Covered:      components,
		Created:      time.Unix(created, 0),
		Nonce:        nonce,
		SignatureKey: sigKey,
		PublicKey:    pub,
	}
	h := sha256.New()
	h.Write(pub) // 32 bytes: the concatenation is unambiguous
	h.Write([]byte(base))
	copy(v.statement[:], h.Sum(nil))
	return v, nil
}

// ParseSignatureKey parses a Signature-Key header value and returns the member
// for label. Only the jwt scheme is supported.
func ParseSignatureKey(value, label string) (SignatureKey, error) {
	sk, err := parseSignatureKey([]string{value}, label)
	if err != nil {
		return SignatureKey{}, err
	}
	return sk, nil
}

func parseSignatureKey(values []string, label string) (SignatureKey, *Error) {
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return SignatureKey{}, errorf(CodeInvalidKey, "malformed Signature-Key")
	}
	m, ok := d.Get(label)
	if !ok {
		return SignatureKey{}, errorf(CodeInvalidSignature, "no Signature-Key for label "+label)
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return SignatureKey{}, errorf(CodeInvalidKey, "Signature-Key member is not an item")
	}
	scheme, ok := it.Value.(httpsfv.Token)
	if !ok {
		return SignatureKey{}, errorf(CodeInvalidKey, "Signature-Key scheme is not a token")
	}
	if scheme != "jwt" {
		return SignatureKey{}, errorf(CodeUnsupportedScheme, "scheme "+string(scheme))
	}
	v, _ := it.Params.Get("jwt")
	jwt, ok := v.(string)
	if !ok || jwt == "" {
		return SignatureKey{}, errorf(CodeInvalidKey, "jwt parameter missing")
	}
	return SignatureKey{Label: label, Scheme: string(scheme), JWT: jwt}, nil
}

// checkDigest compares the sha-256 member of Content-Digest with body.
func checkDigest(values []string, body []byte) *Error {
	if len(values) == 0 {
		return errorf(CodeInvalidSignature, "Content-Digest is missing")
	}
	d, err := httpsfv.UnmarshalDictionary(values)
	if err != nil {
		return errorf(CodeInvalidSignature, "malformed Content-Digest")
	}
	m, ok := d.Get("sha-256")
	if !ok {
		return errorf(CodeInvalidSignature, "Content-Digest has no sha-256")
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return errorf(CodeInvalidSignature, "Content-Digest sha-256 is not an item")
	}
	got, ok := it.Value.([]byte)
	sum := sha256.Sum256(body)
	if !ok || subtle.ConstantTimeCompare(got, sum[:]) != 1 {
		return errorf(CodeInvalidSignature, "Content-Digest does not match the body")
	}
	return nil
}
