package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/sqlite"
	"github.com/kin-agents/kin/internal/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSQLiteStore(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "kin.db"))
	})
}

func TestReopenKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	s := open(t, path)
	r := storetest.Insert(t, s, "root", 0)
	storetest.Insert(t, s, "child", r.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, path) // migrations run again and are a no-op
	anc, err := s2.AgentAncestors(context.Background(), 2)
	if err != nil || len(anc) != 2 {
		t.Fatalf("after reopen: %v, %v", anc, err)
	}
	next := storetest.Insert(t, s2, "third", 0)
	if next.ID != 3 {
		t.Fatalf("ids continue: got %d", next.ID)
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	if _, err := sqlite.Open(context.Background(), "", sqlite.Options{}); err == nil {
		t.Error("empty path accepted")
	}
	if _, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), sqlite.Options{Synchronous: "OFF"}); err == nil {
		t.Error("synchronous=OFF accepted")
	}
}

func TestDriverNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	if got := open(t, path).Driver(); got != "sqlite:"+path {
		t.Errorf("Driver() = %q", got)
	}
}
