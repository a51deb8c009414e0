package httpsig

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// signedPost is a POST with a body, signed by key at created with nonce
// ("" for a random one).
func signedPost(t *testing.T, key ed25519.PrivateKey, created time.Time, nonce, body string) *http.Request {
	t.Helper()
	req, _ := http.NewRequest("POST", "https://kin.example/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if err := Sign(req, key, Params{Created: created, JWT: testJWT(t, key.Public().(ed25519.PublicKey)), Nonce: nonce}); err != nil {
		t.Fatal(err)
	}
	return req
}

// unnoncedPost is signedPost as a signer that sends no nonce signs it
// (AAuth defines none).
func unnoncedPost(t *testing.T, key ed25519.PrivateKey, created time.Time, body string) *http.Request {
	t.Helper()
	req, _ := http.NewRequest("POST", "https://kin.example/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderContentDigest, ContentDigest([]byte(body)))
	req.Header.Set(HeaderSignatureKey, `sig=jwt;jwt="`+testJWT(t, key.Public().(ed25519.PublicKey))+`"`)
	member := `("@method" "@authority" "@path" "signature-key" "content-digest" "content-type");created=` + strconv.FormatInt(created.Unix(), 10)
	base, err := SignatureBase(req, member)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(HeaderSignatureInput, "sig="+member)
	req.Header.Set(HeaderSignature, "sig=:"+base64.StdEncoding.EncodeToString(ed25519.Sign(key, []byte(base)))+":")
	return req
}

// again is the same request once more, as someone who saw it sends it.
func again(t *testing.T, req *http.Request) *http.Request {
	t.Helper()
	c := req.Clone(t.Context())
	body, err := req.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	c.Body = body
	return c
}

func TestSignAddsAFreshNonce(t *testing.T) {
	key := testKey("nonce")
	now := time.Unix(1800000000, 0)
	a, b := signedPost(t, key, now, "", `{"a":1}`), signedPost(t, key, now, "", `{"a":1}`)
	if a.Header.Get(HeaderSignatureInput) == b.Header.Get(HeaderSignatureInput) || a.Header.Get(HeaderSignature) == b.Header.Get(HeaderSignature) {
		t.Fatalf("one request signed twice in one second gave one signature: %s", a.Header.Get(HeaderSignatureInput))
	}
	va, err := Verify(a, now, insecureKeyFromUnverifiedJWT)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := Verify(b, now, insecureKeyFromUnverifiedJWT)
	if err != nil {
		t.Fatal(err)
	}
	if len(va.Nonce) < 16 || va.Nonce == vb.Nonce || !strings.Contains(a.Header.Get(HeaderSignatureInput), `;nonce="`+va.Nonce+`"`) {
		t.Fatalf("nonces %q and %q; want two different ones of 128 bits, in Signature-Input", va.Nonce, vb.Nonce)
	}
}

func codeOrFull(err error) string {
	var full *FullError
	if errors.As(err, &full) {
		return "full"
	}
	return string(codeOf(err))
}

// TestReplaysAcceptEachSignatureOnce: a signature is accepted once, and
// refused for as long as the window would accept it; the same request
// signed afresh is accepted; a signer without a nonce gets one acceptance
// per distinct request, and an exact copy is refused.
func TestReplaysAcceptEachSignatureOnce(t *testing.T) {
	key := testKey("replays")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 0)
	verify := func(req *http.Request, now time.Time) string {
		t.Helper()
		_, err := r.Verify(req, now, insecureKeyFromUnverifiedJWT)
		return codeOrFull(err)
	}

	req := signedPost(t, key, t0, "", `{"spawn":1}`)
	if got := verify(again(t, req), t0); got != "" {
		t.Fatalf("first: %s", got)
	}
	for _, at := range []time.Duration{0, 55 * time.Second, Window} {
		if got := verify(again(t, req), t0.Add(at)); got != string(CodeReplayedRequest) {
			t.Errorf("the same signature %v later: %q; want %s", at, got, CodeReplayedRequest)
		}
	}
	if got := verify(signedPost(t, key, t0.Add(55*time.Second), "", `{"spawn":1}`), t0.Add(55*time.Second)); got != "" {
		t.Errorf("the same body signed afresh: %s", got)
	}
	past := t0.Add(Window + time.Second)
	if got := verify(again(t, req), past); got != string(CodeInvalidSignature) {
		t.Errorf("past the window: %q; want the window's invalid_signature", got)
	}
	if got := verify(signedPost(t, key, past, "", `{"spawn":1}`), past); got != "" {
		t.Errorf("signed afresh past the window: %s", got)
	}
	if r.n != 2 {
		t.Errorf("%d entries past the first one's window; want 2 (it is forgotten)", r.n)
	}

	// Without a nonce: distinct requests in one second pass, a copy does not.
	plain := unnoncedPost(t, key, t0.Add(time.Minute), `{"n":1}`)
	if got := verify(again(t, plain), t0.Add(time.Minute)); got != "" {
		t.Fatalf("a nonce-less signature: %s", got)
	}
	if got := verify(unnoncedPost(t, key, t0.Add(time.Minute), `{"n":2}`), t0.Add(time.Minute)); got != "" {
		t.Errorf("another nonce-less request in the same second: %s", got)
	}
	if got := verify(again(t, plain), t0.Add(time.Minute)); got != string(CodeReplayedRequest) {
		t.Errorf("a copy of a nonce-less request: %q; want %s", got, CodeReplayedRequest)
	}
	// A changed query (not covered by the signature) is the same statement.
	moved := again(t, plain)
	moved.URL.RawQuery = "x=1"
	if got := verify(moved, t0.Add(time.Minute)); got != string(CodeReplayedRequest) {
		t.Errorf("a copy with another query: %q; want %s", got, CodeReplayedRequest)
	}
}

// TestReplaysRememberOnlyVerifiedSignatures: a request that copies an
// honest signer's Signature-Input (its nonce) but does not verify leaves
// nothing behind, nor does a signature by another key over the same base.
func TestReplaysRememberOnlyVerifiedSignatures(t *testing.T) {
	honest, other := testKey("honest"), testKey("other")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 0)
	req := signedPost(t, honest, t0, "chosen-nonce", `{}`)

	forged := again(t, req)
	forged.Header.Set(HeaderSignature, "sig=:"+base64.StdEncoding.EncodeToString(make([]byte, 64))+":")
	if _, err := r.Verify(forged, t0, insecureKeyFromUnverifiedJWT); codeOf(err) != CodeInvalidSignature {
		t.Fatalf("a forged signature: %v", err)
	}
	if _, err := r.Verify(signedPost(t, other, t0, "chosen-nonce", `{}`), t0, insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("another key's signature with the same nonce: %v", err)
	}
	if _, err := r.Verify(again(t, req), t0, insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("the honest request after both: %v", err)
	}
}

// TestReplaysRefuseSignaturesFromBeforeTheStart: what a previous process
// accepted is not remembered, so a signature created before the start's
// second is refused as a replay; one created in it is not.
func TestReplaysRefuseSignaturesFromBeforeTheStart(t *testing.T) {
	key := testKey("restart")
	start := time.Unix(1800000000, 500_000_000)
	r := NewReplays(start, 0)
	if _, err := r.Verify(signedPost(t, key, start.Add(-time.Second), "", `{}`), start, insecureKeyFromUnverifiedJWT); codeOf(err) != CodeReplayedRequest {
		t.Errorf("created a second before the start: %v; want %s", err, CodeReplayedRequest)
	}
	if _, err := r.Verify(signedPost(t, key, start, "", `{}`), start, insecureKeyFromUnverifiedJWT); err != nil {
		t.Errorf("created in the start's second: %v", err)
	}
}

// TestReplaysBound: at capacity, a new signature is refused with a
// *FullError saying when the oldest second leaves the window, and a
// replay is still a replay; once the clock passes the window the
// entries are forgotten and new signatures accepted.
func TestReplaysBound(t *testing.T) {
	key := testKey("bound")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 3)
	var first *http.Request
	for i := range 3 {
		req := signedPost(t, key, t0.Add(time.Duration(i)*time.Second), "", `{}`)
		if _, err := r.Verify(again(t, req), t0.Add(2*time.Second), insecureKeyFromUnverifiedJWT); err != nil {
			t.Fatalf("signature %d of 3: %v", i, err)
		}
		if i == 0 {
			first = req
		}
	}
	_, err := r.Verify(signedPost(t, key, t0.Add(2*time.Second), "", `{}`), t0.Add(2*time.Second), insecureKeyFromUnverifiedJWT)
	var full *FullError
	if !errors.As(err, &full) || full.RetryAfter != Window-time.Second {
		t.Fatalf("a fourth signature: %v; want a *FullError retrying after %v (the first, created at t0, leaves at t0+61s)", err, Window-time.Second)
	}
	if _, err := r.Verify(again(t, first), t0.Add(2*time.Second), insecureKeyFromUnverifiedJWT); codeOf(err) != CodeReplayedRequest {
		t.Fatalf("a replay while full: %v; want %s", err, CodeReplayedRequest)
	}
	now := t0.Add(Window + time.Second)
	if _, err := r.Verify(signedPost(t, key, now, "", `{}`), now, insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("after the first second left the window: %v", err)
	}
	if r.n != 3 {
		t.Fatalf("%d entries; want 3 (two left, one new)", r.n)
	}
	if _, err := r.Verify(again(t, first), now, insecureKeyFromUnverifiedJWT); codeOf(err) != CodeInvalidSignature {
		t.Fatalf("the forgotten first signature: %v; want the window's invalid_signature", err)
	}
}

// TestReplaysWindowFollowsTheLatestClock: a caller whose now lags another's
// (read before a slow verification) is judged by the window at the latest
// now: a signature created inside both windows is accepted, one whose
// second the later caller forgot is refused, and the lagging now forgets
// nothing more nor brings anything back.
func TestReplaysWindowFollowsTheLatestClock(t *testing.T) {
	key := testKey("lag")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 0)
	late := t0.Add(Window + 2*time.Second)
	if _, err := r.Verify(signedPost(t, key, late, "", `{}`), late, insecureKeyFromUnverifiedJWT); err != nil {
		t.Fatalf("the later caller: %v", err)
	}
	lag := late.Add(-time.Second)
	inside := late.Add(-Window)
	if _, err := r.Verify(signedPost(t, key, inside, "", `{}`), lag, insecureKeyFromUnverifiedJWT); err != nil {
		t.Errorf("created at the latest window's start, verified by a lagging now: %v", err)
	}
	if _, err := r.Verify(signedPost(t, key, lag, "", `{}`), lag, insecureKeyFromUnverifiedJWT); err != nil {
		t.Errorf("a fresh signature verified by a lagging now: %v", err)
	}
	if _, err := r.Verify(signedPost(t, key, inside.Add(-time.Second), "", `{}`), lag, insecureKeyFromUnverifiedJWT); codeOf(err) != CodeReplayedRequest {
		t.Errorf("created a second before the latest window, inside the lagging one: %v; want %s", err, CodeReplayedRequest)
	}
	if r.pruned != late.Unix() {
		t.Errorf("the window ends at %d after a lagging now; want %d", r.pruned, late.Unix())
	}
}

// TestReplaysRace: copies of one signed request verified at once, exactly
// one is accepted.
func TestReplaysRace(t *testing.T) {
	key := testKey("race")
	t0 := time.Unix(1800000000, 0)
	r := NewReplays(t0, 0)
	req := signedPost(t, key, t0, "", `{"spawn":1}`)
	copies := make([]*http.Request, 32)
	for i := range copies {
		copies[i] = again(t, req)
	}
	errs := make([]error, len(copies))
	var wg sync.WaitGroup
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.Verify(copies[i], t0, insecureKeyFromUnverifiedJWT)
		}()
	}
	wg.Wait()
	accepted := 0
	for _, err := range errs {
		switch codeOf(err) {
		case "":
			accepted++
		case CodeReplayedRequest:
		default:
			t.Errorf("a racing copy: %v", err)
		}
	}
	if accepted != 1 {
		t.Fatalf("%d of %d racing copies accepted; want exactly 1", accepted, len(copies))
	}
}

// BenchmarkReplays measures what accepting each signature once adds to
// verifying it: the floor, in the same run, is Verify of the same signed
// POSTs (each with its own nonce, as kin's signers send them). Both run on
// every core at once, so the replay cache's lock is contended.
func BenchmarkReplays(b *testing.B) {
	key := testKey("bench")
	jwt := testJWT(&testing.T{}, key.Public().(ed25519.PublicKey))
	t0 := time.Unix(1800000000, 0)
	signed := func(n int) []*http.Request {
		reqs := make([]*http.Request, n)
		for i := range reqs {
			req, _ := http.NewRequest("POST", "https://kin.example/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			if err := Sign(req, key, Params{Created: t0, JWT: jwt}); err != nil {
				b.Fatal(err)
			}
			reqs[i] = req
		}
		return reqs
	}
	run := func(b *testing.B, verify func(*http.Request) error) {
		reqs := signed(b.N)
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := verify(reqs[next.Add(1)-1]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("floor-verify", func(b *testing.B) {
		run(b, func(req *http.Request) error {
			_, err := Verify(req, t0, insecureKeyFromUnverifiedJWT)
			return err
		})
	})
	b.Run("verify-and-accept-once", func(b *testing.B) {
		r := NewReplays(t0, 0)
		run(b, func(req *http.Request) error {
			_, err := r.Verify(req, t0, insecureKeyFromUnverifiedJWT)
			return err
		})
	})
	// The replay check alone, without the noise of Ed25519 around it.
	b.Run("accept-alone", func(b *testing.B) {
		r := NewReplays(t0, b.N)
		vs := make([]*Verified, b.N)
		for i := range vs {
			vs[i] = &Verified{Created: t0}
			binary.LittleEndian.PutUint64(vs[i].statement[:], uint64(i))
		}
		var next atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := r.accept(vs[next.Add(1)-1], t0); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
