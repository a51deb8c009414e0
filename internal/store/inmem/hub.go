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
	all     waiter        // Wait's: woken by every Notify
	waiting chan struct{} // one value when a waiter's taken turns true
	subs    []*Subscription
}

// waiter is a channel the next wake closes, and whether it was handed
// out since (guarded by the hub's mu).
type waiter struct {
	ch    chan struct{}
	taken bool
}

// take hands w's channel out, telling a polling driver that someone
// waits.
func (w *waiter) take(h *Hub) <-chan struct{} {
	if !w.taken {
		w.taken = true
		select {
		case h.waiting <- struct{}{}:
		default:
		}
	}
	return w.ch
}

// wake closes w's channel if it was handed out.
func (w *waiter) wake() {
	if w.taken {
		close(w.ch)
		w.ch = make(chan struct{})
		w.taken = false
	}
}

// Subscription is a waiter that cares for some event types only: a
// commit that appended events of other types alone (NotifyTypes) leaves
// it asleep. Any other Notify wakes it.
type Subscription struct {
	h      *Hub
	types  map[string]bool
	except bool // types are those it does not care for
	waiter
}

// NewHub returns a hub without waiters.
func NewHub() *Hub {
	return &Hub{all: waiter{ch: make(chan struct{})}, waiting: make(chan struct{}, 1)}
}

// Wait returns a channel closed at the next Notify. Take it before reading
// the store, so that a commit between the read and the wait is not missed.
func (h *Hub) Wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all.take(h)
}

// Subscribe makes a waiter woken by commits that appended an event of one
// of types (except: of a type not among them), and by every Notify.
func (h *Hub) Subscribe(types []string, except bool) *Subscription {
	s := &Subscription{h: h, types: make(map[string]bool, len(types)), except: except, waiter: waiter{ch: make(chan struct{})}}
	for _, t := range types {
		s.types[t] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs = append(h.subs, s)
	return s
}

// Wait returns a channel closed at the next commit the subscription cares
// for (or Notify). Take it before reading the store, as Hub.Wait's.
func (s *Subscription) Wait() <-chan struct{} {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.take(s.h)
}

// wants says whether a commit that appended events of types wakes s.
func (s *Subscription) wants(types []string) bool {
	for _, t := range types {
		if s.types[t] != s.except {
			return true
		}
	}
	return false
}

// Notify wakes every waiter: it closes the channel Wait handed out. With
// nobody waiting it costs a lock and nothing else.
func (h *Hub) Notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		s.wake()
	}
	h.all.wake()
}

// NotifyTypes wakes Wait's waiters and the subscriptions that care for
// one of types, the types of the events a commit appended.
func (h *Hub) NotifyTypes(types []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if s.wants(types) {
			s.wake()
		}
	}
	h.all.wake()
}

// Waited reports whether Wait was called since the last Notify: whether
// anyone may be waiting. A waiter that gave up still counts until the next
// Notify.
func (h *Hub) Waited() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.all.taken {
		return true
	}
	for _, s := range h.subs {
		if s.taken {
			return true
		}
	}
	return false
}

// Waiting receives a value when Wait is called first after a Notify (or
// first at all). A driver that polls to see other handles' commits waits on
// it, and polls only while Waited says someone waits. A value may be stale:
// check Waited after receiving it.
func (h *Hub) Waiting() <-chan struct{} { return h.waiting }
