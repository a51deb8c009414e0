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
)

// pruneEvery bounds how often the buckets are swept for full ones.
const pruneEvery = time.Minute

// Config is what a Limiter is built from.
type Config struct {
	// Quotas returns the quotas in force (the profile's); read at each
	// call, so a changed profile applies to the next request.
	Quotas func() kin.Quotas
	// Clock is the time; nil is time.Now.
	Clock func() time.Time
}

// Limiter holds the buckets. Its zero value is unusable; a nil *Limiter
// allows everything (services built without one, in unit tests).
type Limiter struct {
	quotas func() kin.Quotas
	now    func() time.Time

	mu        sync.Mutex
	buckets   map[key]*rate.Limiter
	lastPrune time.Time
}

type key struct {
	agent kin.AgentID
	kind  Kind
}

// New makes a Limiter.
func New(c Config) *Limiter {
	l := &Limiter{quotas: c.Quotas, now: c.Clock, buckets: map[key]*rate.Limiter{}}
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

// AllowAgent is Allow for a known agent.
func (l *Limiter) AllowAgent(id kin.AgentID, kind Kind) error {
	if l == nil || id == 0 {
		return nil
	}
	r := l.rate(kind)
	if r.Burst < 1 || !(r.PerSecond > 0) {
		return nil // no quota of this kind: unlimited
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(now)
	k := key{id, kind}
	b := l.buckets[k]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(r.PerSecond), r.Burst)
		// A new bucket starts full at now (rate.NewLimiter's is full at
		// its first use, which is now).
		l.buckets[k] = b
	} else {
		if b.Limit() != rate.Limit(r.PerSecond) {
			b.SetLimitAt(now, rate.Limit(r.PerSecond))
		}
		if b.Burst() != r.Burst {
			b.SetBurstAt(now, r.Burst)
		}
	}
	res := b.ReserveN(now, 1)
	delay := res.DelayFrom(now)
	if delay == 0 {
		return nil
	}
	res.CancelAt(now) // refused: the token is not spent
	err := kin.Errorf(kin.ECodeRateLimited,
		"agent %d sent %s faster than its quota allows (%g a second after a burst of %d, the profile's quotas.%s)",
		id, what(kind), r.PerSecond, r.Burst, kind)
	err.RetryAfter = math.Max(delay.Seconds(), 0.001)
	return err
}

// Forget drops an agent's buckets (it ended).
func (l *Limiter) Forget(id kin.AgentID) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.buckets, key{id, Messages})
	delete(l.buckets, key{id, Reports})
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
	if kind == Messages {
		return q.Messages
	}
	return q.Reports
}

func what(kind Kind) string {
	if kind == Messages {
		return "messages"
	}
	return "reports (usage, heartbeats, status changes, promotions, authorizations)"
}

// CheckMessage refuses a message body longer than quotas.message_bytes
// from an agent (the operator's are bounded by kin.MaxMessageLen only).
func (l *Limiter) CheckMessage(ctx context.Context, n int) error {
	if l == nil || caller.Of(ctx).Agent == 0 {
		return nil
	}
	if max := l.Quotas().MessageBytes; max > 0 && n > max {
		return kin.Errorf(kin.ECodeInvalid, "the message is %d bytes long; this agent may send at most %d (the profile's quotas.message_bytes)", n, max)
	}
	return nil
}
