package top

import (
	"sync/atomic"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/kin-agents/kin/kin"
)

// minReload is the least time between two reloads caused by events: a
// burst of events (a subtree stopping) costs at most ten reloads a second.
const minReload = 100 * time.Millisecond

// feed connects the event stream to the model: follow notes each event and
// signals changed; waitChange waits for the signal and reloads.
type feed struct {
	changed chan struct{} // one pending signal at most: bursts coalesce
	seq     atomic.Int64  // the last event seen
	last    time.Time     // when waitChange last reloaded (its own)
}

func newFeed() *feed { return &feed{changed: make(chan struct{}, 1)} }

// signal notes event seq.
func (f *feed) signal(seq int64) {
	f.seq.Store(seq)
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// follow follows the event stream from the last event seen until the
// model's context ends; it returns followEndedMsg if the stream breaks.
func (m *Model) follow() tea.Msg {
	err := m.svc.FollowEvents(m.ctx, kin.EventFilter{Since: m.feed.seq.Load()}, func(e kin.Event) error {
		m.feed.signal(e.Seq)
		return nil
	})
	if m.ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errStreamEnded
	}
	return followEndedMsg{err: err}
}

var errStreamEnded = kin.Errorf(kin.ECodeUnavailable, "the event stream ended")

// waitChange waits for events, then reloads the agents, no sooner than
// minReload after its last reload. Only one waitChange runs at a time: the
// model starts the next when this one's load is in.
func (m *Model) waitChange() tea.Msg {
	select {
	case <-m.ctx.Done():
		return nil
	case <-m.feed.changed:
	}
	if wait := minReload - time.Since(m.feed.last); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-m.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	// The load below covers whatever came in meanwhile.
	select {
	case <-m.feed.changed:
	default:
	}
	m.feed.last = time.Now()
	msg := m.load()
	msg.fromFeed = true
	return msg
}
