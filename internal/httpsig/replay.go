package httpsig

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultReplayCapacity is how many accepted signatures a Replays holds
// unless told otherwise, in about 75 MB when full (78 bytes an entry,
// measured). An entry is kept until created + Window and created may be
// up to Window ahead, so one lives up to two windows: the cache holds
// about 8,300 signatures a second from signers that date them ahead.
const DefaultReplayCapacity = 1_000_000

// Replays accepts each signature once. RFC 9421 (§7.2.2) leaves replay to
// the application, and the AAuth profile ("Freshness and Replay") lets a verifier keep
// a cache for the window; this is that cache.
//
// A signature is remembered by its signing key and its signature base,
// which holds created, every covered component (the body's digest among
// them) and the nonce kin's signers add (Params.Nonce): a replay, byte for
// byte or with uncovered parts changed, has the same base; a fresh
// signature of the same request has another nonce. It is remembered for
// as long as the window accepts it (until created + Window), in buckets by
// created second, so forgetting costs one bucket a second.
//
// Only a signature that verified is remembered, so garbage cannot block an
// honest signer's request. One that was created before the Replays was
// made (start) is refused as a replay too: a previous process may have
// accepted it, and the remedy is the same, to sign again. When
// capacity signatures are inside the window, new ones are refused
// (*FullError) until the oldest second leaves it: forgetting a live entry
// instead would let its signature be replayed.
//
// A Replays is safe for concurrent use: of two requests carrying the same
// signature at once, exactly one is accepted. Callers read now before
// verifying, so requests reach the lock out of their clocks' order: one
// whose now is a second later may already have forgotten the second a
// slower one's signature was created in. The cache's window therefore
// ends at the latest now it has seen, not the caller's: a signature
// created before it is refused as a replay (it may have been accepted,
// and its record is gone), as if it had arrived that second later.
type Replays struct {
	start    int64 // unix second
	capacity int

	mu        sync.Mutex
	n         int   // entries in byCreated
	pruned    int64 // the latest now seen, the second of the last prune
	byCreated map[int64]map[[sha256.Size]byte]struct{}
}

// NewReplays returns an empty Replays that refuses signatures created
// before start (the verifier's start) and holds at most capacity entries
// (DefaultReplayCapacity when not positive).
func NewReplays(start time.Time, capacity int) *Replays {
	if capacity <= 0 {
		capacity = DefaultReplayCapacity
	}
	return &Replays{start: start.Unix(), capacity: capacity, pruned: start.Unix(), byCreated: make(map[int64]map[[sha256.Size]byte]struct{})}
}

// FullError refuses a request because the Replays holds its capacity of
// signatures inside the window. The signer did nothing wrong: answer it as
// the server's (503) with RetryAfter, when the oldest second leaves the
// window.
type FullError struct {
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("httpsig: the replay cache is full; retry after %v", e.RetryAfter)
}

// Verify is Verify, then the replay check: a signature that verified is
// accepted once. Its errors are Verify's, an *Error with
// CodeReplayedRequest for a signature already accepted, created before
// start, or created before the window of the latest now seen (another
// caller's), and a *FullError.
func (r *Replays) Verify(req *http.Request, now time.Time, resolve func(sigKey SignatureKey) (ed25519.PublicKey, error)) (*Verified, error) {
	v, err := Verify(req, now, resolve)
	if err != nil {
		return nil, err
	}
	if err := r.accept(v, now); err != nil {
		return nil, err
	}
	return v, nil
}

// accept records v's signature, or refuses it.
func (r *Replays) accept(v *Verified, now time.Time) error {
	created := v.Created.Unix()
	if created < r.start {
		return errorf(CodeReplayedRequest, fmt.Sprintf("created %d s before this verifier started: it may have been accepted before", r.start-created))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now.Unix())
	if oldest := r.oldest(); created < oldest {
		return errorf(CodeReplayedRequest, fmt.Sprintf("created %d s before the window of the latest request: its second is forgotten, it may have been accepted", oldest-created))
	}
	second := r.byCreated[created]
	if _, seen := second[v.statement]; seen {
		return errorf(CodeReplayedRequest, "this signature was already accepted")
	}
	if r.n >= r.capacity {
		return &FullError{RetryAfter: r.retryAfter(now)}
	}
	if second == nil {
		second = make(map[[sha256.Size]byte]struct{})
		r.byCreated[created] = second
	}
	second[v.statement] = struct{}{}
	r.n++
	return nil
}

// prune forgets the seconds the window no longer accepts (Verify refuses
// a created more than Window before now), at most once a second. A now
// behind the latest one seen forgets nothing and moves nothing back.
func (r *Replays) prune(now int64) {
	if now <= r.pruned {
		return
	}
	r.pruned = now
	oldest := r.oldest()
	for created, second := range r.byCreated {
		if created < oldest {
			r.n -= len(second)
			delete(r.byCreated, created)
		}
	}
}

// oldest is the first created second still remembered: the window's
// start at the latest now seen.
func (r *Replays) oldest() int64 { return r.pruned - int64(Window/time.Second) }

// retryAfter is how long until the oldest remembered second is forgotten.
func (r *Replays) retryAfter(now time.Time) time.Duration {
	first := now.Unix()
	for created := range r.byCreated {
		first = min(first, created)
	}
	return max(time.Unix(first+int64(Window/time.Second)+1, 0).Sub(now), time.Second)
}
