package quota

import (
	"context"
	"sync"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// MaxStreams is how many long-lived answers one agent may hold open at
// once: logs, followed events, followed inbox. Each costs the daemon a
// connection, goroutines, a buffer and, for a log, its open files, for as
// long as the agent keeps it; unbounded, one agent took every descriptor
// the daemon had (attack21_test.go).
const MaxStreams = 16

// Streams counts the streams each agent holds open. Its zero value is
// ready; a nil *Streams allows everything.
type Streams struct {
	mu   sync.Mutex
	open map[kin.AgentID]int
}

// Open counts one more stream for the agent that sent the request ctx
// carries, and returns its release (safe to call more than once); past
// MaxStreams it refuses with rate_limited. The operator is never limited.
func (s *Streams) Open(ctx context.Context) (release func(), err error) {
	id := caller.Of(ctx).Agent
	if s == nil || id == 0 {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[kin.AgentID]int{}
	}
	if n := s.open[id]; n >= MaxStreams {
		e := kin.Errorf(kin.ECodeRateLimited,
			"agent %d holds %d streams open (logs, followed events or inbox): at most %d at once; end one first", id, n, MaxStreams)
		e.RetryAfter = 1
		return nil, e
	}
	s.open[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.open[id]--; s.open[id] <= 0 {
				delete(s.open, id)
			}
		})
	}, nil
}

// Held is how many streams agent id holds open.
func (s *Streams) Held(id kin.AgentID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open[id]
}
