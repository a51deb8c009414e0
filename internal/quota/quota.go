package quota

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// Kind is what a bucket counts.
type Kind string

const (
	// Messages are an agent's messages to other agents (quotas.messages).
	Messages Kind = "messages"
	// Reports are everything else an agent makes kin record on its own
	// initiative: usage, heartbeats, status changes of its descendants,
	// stage promotions, tool authorizations (quotas.reports).
	Reports Kind = "reports"
	// ModelRequests are calls through the model gateway
	// (quotas.model_requests); ModelTokens the tokens they used
	// (quotas.model_tokens, charged after each call: Charge).
	ModelRequests Kind = "model_requests"
	ModelTokens   Kind = "model_tokens"
)

// kinds are every Kind, for Forget.
var kinds = []Kind{Messages, Reports, ModelRequests, ModelTokens}

// pruneEvery bounds how often the buckets are swept for full ones.
const pruneEvery = time.Minute

// Config is what a Limiter is built from.
type Config struct {
	// Quotas returns the quotas in force (the profile's); read at each
	// call, so a changed profile applies to the next request.
	Quotas func() kin.Quotas
	// Clock is the time; nil is time.Now.
	Clock func() time.Time
	// Chain returns an agent and its ancestors, the agent first (the
	// lineage's Chain). What an agent sends is charged to its own bucket
	// and to each ancestor's bucket for its descendants, so that the
	// descendants of an agent share one quota however many there are;
	// nil charges the agent's own bucket only.
	Chain func(kin.AgentID) []kin.AgentID
}

// Limiter holds the buckets. Its zero value is unusable; a nil *Limiter
// allows everything (services built without one, in unit tests).
type Limiter struct {
	quotas func() kin.Quotas
	now    func() time.Time
	chain  func(kin.AgentID) []kin.AgentID

	mu        sync.Mutex
	buckets   map[key]*rate.Limiter
	lastPrune time.Time
}

type key struct {
	agent kin.AgentID
	kind  Kind
	// below is the bucket an agent's descendants share, beside its own:
	// a flood from below empties it and never the agent's own, so the
	// agent can still heartbeat, message, and stop the flooding one.
	below bool
}

// New makes a Limiter.
func New(c Config) *Limiter {
	l := &Limiter{quotas: c.Quotas, now: c.Clock, chain: c.Chain, buckets: map[key]*rate.Limiter{}}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

// Quotas returns the quotas in force (the defaults for a nil Limiter's
// caller to ignore: zero values).
func (l *Limiter) Quotas() kin.Quotas {
	if l == nil || l.quotas == nil {
		return kin.Quotas{}
	}
	return l.quotas()
}

// Allow takes one token of kind from the bucket of the agent that sent the
// request ctx carries. The operator is never limited; an agent past its
// quota gets rate_limited with RetryAfter set, and must not be answered
// with anything written.
func (l *Limiter) Allow(ctx context.Context, kind Kind) error {
	c := caller.Of(ctx)
	if l == nil || c.Agent == 0 {
		return nil
	}
	return l.AllowAgent(c.Agent, kind)
}

// AllowAgent is Allow for a known agent. The token is taken from the
// agent's own bucket and from each ancestor's bucket for its descendants,
// or from none: the agent is refused if any of them is empty, retry_after
// the longest wait among them. So the descendants of an agent, however
// many it spawns over time, send together at most what one agent may
// (and the agent itself as much again, from its own bucket).
func (l *Limiter) AllowAgent(id kin.AgentID, kind Kind) error {
	var chain []kin.AgentID
	if l != nil && l.chain != nil {
		chain = l.chain(id)
	}
	return l.allow(id, kind, chain)
}

// AllowOwn is Allow charging the agent's own bucket only: for what adds
// nothing to the store (a heartbeat updates the agent's row), so that a
// large tree's heartbeats do not empty its ancestors' buckets.
func (l *Limiter) AllowOwn(ctx context.Context, kind Kind) error {
	c := caller.Of(ctx)
	if l == nil || c.Agent == 0 {
		return nil
	}
	return l.allow(c.Agent, kind, nil)
}

func (l *Limiter) allow(id kin.AgentID, kind Kind, chain []kin.AgentID) error {
	if l == nil || id == 0 {
		return nil
	}
	r := l.rate(kind)
	if r.Burst < 1 || !(r.PerSecond > 0) {
		return nil // no quota of this kind: unlimited
	}
	keys := []key{{id, kind, false}}
	for _, a := range chain {
		if a != id {
			keys = append(keys, key{a, kind, true})
		}
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(now)
	// Reserve on every bucket, then cancel them all if any must wait:
	// under the lock nothing else reserves between, so a cancel restores
	// exactly the token its reservation took.
	res := make([]*rate.Reservation, 0, len(keys))
	var delay time.Duration
	var empty key // the bucket that must wait longest
	for _, k := range keys {
		rv := l.bucketLocked(k, r, now).ReserveN(now, 1)
		res = append(res, rv)
		if d := rv.DelayFrom(now); d > delay {
			delay, empty = d, k
		}
	}
	if delay == 0 {
		return nil
	}
	for _, rv := range res {
		rv.CancelAt(now) // refused: no token is spent
	}
	var err *kin.Error
	if !empty.below {
		err = kin.Errorf(kin.ECodeRateLimited,
			"agent %d sent %s faster than its quota allows (%g a second after a burst of %d, the profile's quotas.%s)",
			id, what(kind), r.PerSecond, r.Burst, kind)
	} else {
		err = kin.Errorf(kin.ECodeRateLimited,
			"agent %d sent %s faster than its ancestor agent %d's quota allows: an agent's descendants share one quota (%g a second after a burst of %d, the profile's quotas.%s)",
			id, what(kind), empty.agent, r.PerSecond, r.Burst, kind)
	}
	err.RetryAfter = math.Max(delay.Seconds(), 0.001)
	return err
}

// bucketLocked returns the bucket at k, made full at now if there is none,
// with the rate in force.
func (l *Limiter) bucketLocked(k key, r kin.Rate, now time.Time) *rate.Limiter {
	b := l.buckets[k]
	if b == nil {
		// A new bucket starts full at now (rate.NewLimiter's is full at
		// its first use, which is now).
		b = rate.NewLimiter(rate.Limit(r.PerSecond), r.Burst)
		l.buckets[k] = b
		return b
	}
	if b.Limit() != rate.Limit(r.PerSecond) {
		b.SetLimitAt(now, rate.Limit(r.PerSecond))
	}
	if b.Burst() != r.Burst {
		b.SetBurstAt(now, r.Burst)
	}
	return b
}

// Forget drops an agent's buckets (it ended).
func (l *Limiter) Forget(id kin.AgentID) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, kind := range kinds {
		delete(l.buckets, key{id, kind, false})
		delete(l.buckets, key{id, kind, true})
	}
}

// Len is the number of buckets held (for tests of the memory bound).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// pruneLocked drops buckets that have refilled: a full bucket allows
// exactly what a new one would, so memory holds only agents that were
// busy within the last Burst/PerSecond seconds (10 s by default).
func (l *Limiter) pruneLocked(now time.Time) {
	if now.Sub(l.lastPrune) < pruneEvery {
		return
	}
	l.lastPrune = now
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.buckets, k)
		}
	}
}

func (l *Limiter) rate(kind Kind) kin.Rate {
	q := l.Quotas()
	switch kind {
	case Messages:
		return q.Messages
	case ModelRequests:
		return q.ModelRequests
	case ModelTokens:
		return q.ModelTokens
	}
	return q.Reports
}

func what(kind Kind) string {
	switch kind {
	case Messages:
		return "messages"
	case ModelRequests:
		return "model calls"
	case ModelTokens:
		return "model tokens"
	}
	return "reports (usage, heartbeats, status changes, promotions, authorizations)"
}

// Charge takes n tokens of kind from agent id's bucket and from each
// ancestor's bucket for its descendants, whatever they hold: what a model
// call used, known only after it. A bucket left in debt refuses the next
// Allow until it refills. n is capped at the burst (a bucket is never
// more than one burst in debt).
func (l *Limiter) Charge(id kin.AgentID, kind Kind, n int) {
	if l == nil || id == 0 || n <= 0 {
		return
	}
	r := l.rate(kind)
	if r.Burst < 1 || !(r.PerSecond > 0) {
		return
	}
	n = min(n, r.Burst)
	keys := []key{{id, kind, false}}
	if l.chain != nil {
		for _, a := range l.chain(id) {
			if a != id {
				keys = append(keys, key{a, kind, true})
			}
		}
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		l.bucketLocked(k, r, now).ReserveN(now, n)
	}
}

// CheckMessage refuses a message text that takes more than
// quotas.message_bytes as stored from an agent (the operator's are bounded
// by kin.MaxMessageLen only). Stored is JSON-encoded, as kin.db and
// messages.jsonl hold it: a control character costs 6 bytes (\u0001), a
// quote or a backslash 2, so what the quota bounds is what the disk holds.
func (l *Limiter) CheckMessage(ctx context.Context, text string) error {
	if l == nil || caller.Of(ctx).Agent == 0 {
		return nil
	}
	if max := l.Quotas().MessageBytes; max > 0 {
		if n := StoredLen(text); n > max {
			if n == len(text) {
				return kin.Errorf(kin.ECodeInvalid, "the message is %d bytes long; this agent may send at most %d (the profile's quotas.message_bytes)", n, max)
			}
			return kin.Errorf(kin.ECodeInvalid, "the message is %d bytes long as stored (%d bytes of text, control characters, quotes and backslashes escaped in JSON); this agent may send at most %d (the profile's quotas.message_bytes)", n, len(text), max)
		}
	}
	return nil
}

// StoredLen is the length of s as a JSON string without its quotes, the
// way kin stores it (kin.NewEvent: HTML characters are not escaped).
func StoredLen(s string) int {
	b, err := kin.Marshal(s)
	if err != nil {
		return len(s)
	}
	return len(b) - 2 // the quotes
}
