package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/kin"
)

// TestOwnCommitWakesForAnotherHandlesEventsBeforeIt: a waiter for one type
// of event is woken by another handle's event of that type even when this
// handle commits an event of another type right after it, before the poll
// has seen the other handle's commit. This handle's commit announced the
// log up to its own size by its own types only, and the other handle's
// commit, seen later below that size, woke nobody: a fleet host's follower
// missed another host's revocation until its 5 s poll.
func TestOwnCommitWakesForAnotherHandlesEventsBeforeIt(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	appendOne := func(s *sqlite.Store, typ string) {
		t.Helper()
		if err := s.Update(ctx, func(tx store.Tx) error {
			return store.AppendEvent(ctx, tx, time.Now(), typ, 1, 0, map[string]string{"x": "y"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	wait := store.WaitFor(a, []string{kin.EventAgentStatus}, false)
	ch := wait()
	appendOne(b, kin.EventAgentStatus)  // another handle's, of the type waited for
	appendOne(a, kin.EventAgentMessage) // this handle's, of another type, at once
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter for agent.status was not woken by the other handle's agent.status")
	}
}
