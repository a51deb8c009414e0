package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/store"
)

// TestOnlyWriterHoldsTheFile: a handle opened as the file's only writer
// (a daemon on its home's kin.db, whose rows it keeps between reads) keeps
// every other handle of this package from writing the file while it is
// open, with an error that names the fix; once it is closed they open.
// An only writer opened beside another handle keeps no rows, and refuses
// no one.
func TestOnlyWriterHoldsTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	only, err := Open(ctx, path, Options{OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	if !only.KeepsRows() {
		t.Fatal("the only writer keeps no rows")
	}
	_, err = Open(ctx, path, Options{})
	if !errors.Is(err, ErrNotOnlyWriter) {
		t.Fatalf("a second handle beside the only writer: %v", err)
	}
	for _, want := range []string{path, "stop that daemon", "sqlite:PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := Open(ctx, path, Options{OnlyWriter: true}); !errors.Is(err, ErrNotOnlyWriter) {
		t.Fatalf("a second only writer: %v", err)
	}
	if err := only.Update(ctx, func(store.Tx) error { return nil }); err != nil {
		t.Fatalf("the only writer after the refusals: %v", err)
	}
	if err := only.Close(); err != nil {
		t.Fatal(err)
	}

	shared, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("a handle once the only writer closed: %v", err)
	}
	defer shared.Close()
	late, err := Open(ctx, path, Options{OnlyWriter: true})
	if err != nil {
		t.Fatalf("an only writer beside a handle: %v", err)
	}
	defer late.Close()
	if late.KeepsRows() {
		t.Fatal("an only writer beside another handle keeps rows it would not see change")
	}
	third, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("a third handle: %v", err)
	}
	third.Close()
}
