package daemon

import (
	"context"
	"sync"

	"github.com/kin-agents/kin/internal/store"
)

// hub tells followers of the event stream that new events were committed.
// It carries no events: followers read them from the store by sequence
// number, so none is lost or reordered, and a slow follower costs nothing.
type hub struct {
	mu sync.Mutex
	ch chan struct{}
}

func newHub() *hub { return &hub{ch: make(chan struct{})} }

// wait returns a channel closed at the next notify. Take it before reading
// the store, so a commit between the read and the wait is not missed.
func (h *hub) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ch
}

func (h *hub) notify() {
	h.mu.Lock()
	close(h.ch)
	h.ch = make(chan struct{})
	h.mu.Unlock()
}

// notifyingStore is the daemon's store: every Update that committed wakes
// the hub, so that no writer has to.
type notifyingStore struct {
	store.Store
	hub *hub
}

func (s notifyingStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if err := s.Store.Update(ctx, fn); err != nil {
		return err
	}
	s.hub.notify()
	return nil
}
