package inmem

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHubWakesWhatWasTakenBeforeNotify(t *testing.T) {
	h := NewHub()
	if h.Waited() {
		t.Fatal("a new hub says someone waits")
	}
	a, b := h.Wait(), h.Wait()
	if a != b || !h.Waited() {
		t.Fatal("two waits before a notify got different channels, or Waited is false")
	}
	select {
	case <-h.Waiting():
	default:
		t.Fatal("the first Wait did not signal Waiting")
	}
	if closed(a) {
		t.Fatal("closed before any notify")
	}
	h.Notify()
	if !closed(a) || h.Waited() {
		t.Fatal("Notify did not close the channel taken before it, or Waited stayed true")
	}
	c := h.Wait()
	if closed(c) {
		t.Fatal("a channel taken after the notify is already closed")
	}
	h.Notify()
	h.Notify() // nobody took the new channel: nothing to close
	if !closed(c) {
		t.Fatal("second notify did not close the second channel")
	}
	if d := h.Wait(); closed(d) {
		t.Fatal("a channel taken after notifies without waiters is closed")
	}
}

// TestSubscriptionSleepsThroughOtherTypes: a subscription wakes for a
// commit of a type it cares for (or, except, of any other), sleeps
// through the rest, and wakes at every plain Notify (another handle's
// commit, whose types are unknown); Wait's waiters wake at all of them.
func TestSubscriptionSleepsThroughOtherTypes(t *testing.T) {
	h := NewHub()
	only := h.Subscribe([]string{"agent.registered"}, false)
	but := h.Subscribe([]string{"model.call"}, true)
	if h.Waited() {
		t.Fatal("subscribing is not waiting")
	}
	o, b, all := only.Wait(), but.Wait(), h.Wait()
	if !h.Waited() {
		t.Fatal("Waited is false with subscriptions waiting")
	}
	h.NotifyTypes([]string{"model.call", "model.call"})
	if closed(o) || closed(b) || !closed(all) {
		t.Fatalf("model.calls woke: only %v, but %v, all %v; want only Wait's waiters", closed(o), closed(b), closed(all))
	}
	if !h.Waited() {
		t.Fatal("Waited is false with the subscriptions still waiting")
	}
	h.NotifyTypes([]string{"model.call", "agent.exited"})
	if closed(o) || !closed(b) {
		t.Fatalf("agent.exited woke only %v, but %v; want but alone", closed(o), closed(b))
	}
	b = but.Wait()
	h.NotifyTypes([]string{"agent.registered"})
	if !closed(o) || !closed(b) {
		t.Fatalf("agent.registered woke only %v, but %v; want both", closed(o), closed(b))
	}
	o, b = only.Wait(), but.Wait()
	h.Notify()
	if !closed(o) || !closed(b) || h.Waited() {
		t.Fatal("a plain Notify did not wake every subscription")
	}
}
