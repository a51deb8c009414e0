// Package inmem holds in-memory implementations of the store's seams, for
// drivers and tests to build on. Hub is a store.Notifier: what a driver
// uses to wake the waiters of its own handle, the way benbjohnson/wtf's
// inmem.EventService serves its EventService.
//
// It never holds data: waiters read what changed from the store, so a hub
// can neither lose nor reorder anything, and a slow waiter costs nothing.
package inmem

import (
	"sync"

	"github.com/kin-agents/kin/internal/store"
)

var _ store.Notifier = (*Hub)(nil)

// Hub hands out channels that Notify closes. The zero value is not usable:
// make one with NewHub.
type Hub struct {
	mu      sync.Mutex
	ch      chan struct{} // closed by the next Notify
	taken   bool          // Wait handed ch out since the last Notify
	waiting chan struct{} // one value when taken turns true
}

// NewHub returns a hub without waiters.
func NewHub() *Hub {
	return &Hub{ch: make(chan struct{}), waiting: make(chan struct{}, 1)}
}

// Wait returns a channel closed at the next Notify. Take it before reading
// the store, so that a commit between the read and the wait is not missed.
func (h *Hub) Wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.taken {
		h.taken = true
		select {
		case h.waiting <- struct{}{}:
		default:
		}
	}
	return h.ch
}

// Notify wakes every waiter: it closes the channel Wait handed out. With
// nobody waiting it costs a lock and nothing else.
func (h *Hub) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.taken {
		return
	}
	close(h.ch)
	h.ch = make(chan struct{})
	h.taken = false
}

// Waited reports whether Wait was called since the last Notify: whether
// anyone may be waiting. A waiter that gave up still counts until the next
// Notify.
func (h *Hub) Waited() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.taken
}

// Waiting receives a value when Wait is called first after a Notify (or
// first at all). A driver that polls to see other handles' commits waits on
// it, and polls only while Waited says someone waits. A value may be stale:
// check Waited after receiving it.
func (h *Hub) Waiting() <-chan struct{} { return h.waiting }
