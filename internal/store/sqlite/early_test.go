package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// earlyAgent registers an agent named name with UpdateEarlyDeferrable.
func earlyAgent(ctx context.Context, t *testing.T, s *Store, name string) (kin.AgentID, func() error) {
	t.Helper()
	var id kin.AgentID
	now := time.Now().UTC()
	durable, err := s.UpdateEarlyDeferrable(ctx, func(tx store.Tx) error {
		a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: kin.Agent{Name: name, Status: kin.StatusActive, State: kin.StateRegistered, Life: kin.LifeOwned, CreatedAt: now, UpdatedAt: now}})
		if err != nil {
			return err
		}
		id = a.ID
		return store.AppendEvent(ctx, tx, now, kin.EventAgentRegistered, a.ID, 0, kin.AgentRegisteredData{Agent: a.ID, Name: a.Name})
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, durable
}

// TestEarlyUpdate: an early Update is visible when it returns, committed
// without the disk's wait (synchronous=NORMAL), and its durable syncs the
// write-ahead log as a FULL commit does; the next durable Update commits
// FULL again.
func TestEarlyUpdate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, durable := earlyAgent(ctx, t, s, "early")
	if a, err := s.AgentGetByID(ctx, id); err != nil || a.Name != "early" {
		t.Fatalf("right after an early Update: %+v, %v; want its agent visible", a, err)
	}
	if s.syncNow != "NORMAL" {
		t.Fatalf("an early batch committed with synchronous=%s; want NORMAL, synced after", s.syncNow)
	}
	if err := durable(); err != nil {
		t.Fatal(err)
	}
	if err := durable(); err != nil { // again: the same answer
		t.Fatal(err)
	}
	if s.wal == nil {
		t.Fatal("durable returned, but the write-ahead log was never synced")
	}
	if same, err := sameFile(s.wal, path+"-wal"); err != nil || !same {
		t.Fatalf("the log synced is not the one at %s-wal (%v)", path, err)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s.syncNow != "FULL" {
		t.Fatalf("a durable Update after an early one committed with synchronous=%s", s.syncNow)
	}

	// A log replaced at its path (as after every connection closed) is
	// opened again, not synced through the old file.
	old := s.wal
	if err := os.Rename(path+"-wal", path+"-wal.moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+"-wal", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.syncWAL(); err != nil {
		t.Fatal(err)
	}
	if s.wal == old {
		t.Fatal("the log at the path changed, and the old one was synced")
	}
	if same, err := sameFile(s.wal, path+"-wal"); err != nil || !same {
		t.Fatalf("after the log changed: synced a file not at its path (%v)", err)
	}
	// Put the real log back before the store goes on.
	s.wal.Close()
	s.wal = nil
	if err := os.Rename(path+"-wal.moved", path+"-wal"); err != nil {
		t.Fatal(err)
	}
}

// TestEarlyUpdateNormalStore: a store opened with synchronous=NORMAL
// syncs nothing for an early Update: that is its durability.
func TestEarlyUpdateNormalStore(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "kin.db"), Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, durable := earlyAgent(ctx, t, s, "early")
	if err := durable(); err != nil {
		t.Fatal(err)
	}
	if s.wal != nil {
		t.Fatal("a NORMAL store synced its log for an early Update")
	}
}
