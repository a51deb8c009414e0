package sqlstore

import (
	"testing"
	"time"
)

// TestWarmHoldLapses: a hold stands until released, or until warmHoldMax
// after the last hold was taken: a hold its holder forgot delays the
// warming, it never ends it; a release wakes the warmer.
func TestWarmHoldLapses(t *testing.T) {
	w := newRowWarmer()
	if free, _ := w.held(); free != nil {
		t.Fatal("held with no hold taken")
	}
	release := w.hold()
	forgotten := w.hold()
	_ = forgotten
	free, left := w.held()
	if free == nil || left <= 0 || left > warmHoldMax {
		t.Fatalf("two holds: held %v, for %s (want at most %s)", free != nil, left, warmHoldMax)
	}
	release()
	release()
	if again, _ := w.held(); again == nil {
		t.Fatal("one hold released of two: not held any more")
	}
	select {
	case <-free:
		t.Fatal("free closed with a hold left")
	default:
	}
	// The forgotten one lapses at until.
	w.mu.Lock()
	w.until = time.Now().Add(-time.Millisecond)
	w.mu.Unlock()
	if lapsed, _ := w.held(); lapsed != nil {
		t.Fatal("a hold past warmHoldMax still holds")
	}
	// A new hold holds again, and its release frees and wakes.
	select {
	case <-w.wake: // drain
	default:
	}
	r2 := w.hold()
	forgotten()
	if f, _ := w.held(); f == nil {
		t.Fatal("a new hold after a lapse does not hold")
	}
	r2()
	if f, _ := w.held(); f != nil {
		t.Fatal("every hold released: still held")
	}
	select {
	case <-w.wake:
	default:
		t.Fatal("the last release did not wake the warmer")
	}
}
