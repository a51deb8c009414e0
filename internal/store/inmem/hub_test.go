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
