package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// TestWriterCacheSize: the writer's connection has writerCacheKiB of page
// cache (issue 22's memory: SQLite's default cost about 4 MiB there), the
// readers SQLite's default.
func TestWriterCacheSize(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "kin.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got int
	if err := s.writer.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != -writerCacheKiB {
		t.Errorf("the writer's cache_size is %d, want %d (KiB)", got, -writerCacheKiB)
	}
	if err := s.pdb.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != -2000 {
		t.Errorf("a reader's cache_size is %d, want SQLite's default -2000", got)
	}
}
