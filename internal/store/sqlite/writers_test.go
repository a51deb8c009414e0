package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// TestOnlyWriterHoldsTheFile: a handle opened as the file's only writer
// (a daemon on its home's kin.db, whose rows it keeps between reads) keeps
// every other handle of this package from writing the file while it is
// open, with an error that names the fix (reading stays open to them);
// once it is closed they write. An only writer opened beside a handle
// that writes keeps no rows, and refuses no one.
func TestOnlyWriterHoldsTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	nop := func(store.Tx) error { return nil }
	only, err := Open(ctx, path, Options{OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	if !only.KeepsRows() {
		t.Fatal("the only writer keeps no rows")
	}
	other, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("a second handle beside the only writer, to read: %v", err)
	}
	defer other.Close()
	if _, err := other.AgentList(ctx, kin.AgentFilter{}); err != nil {
		t.Fatalf("a read beside the only writer: %v", err)
	}
	err = other.Update(ctx, nop)
	if !errors.Is(err, ErrNotOnlyWriter) {
		t.Fatalf("a write beside the only writer: %v", err)
	}
	for _, want := range []string{path, "stop that daemon", "sqlite:PATH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := Open(ctx, path, Options{OnlyWriter: true}); !errors.Is(err, ErrNotOnlyWriter) {
		t.Fatalf("a second only writer: %v", err)
	}
	if err := only.Update(ctx, nop); err != nil {
		t.Fatalf("the only writer after the refusals: %v", err)
	}
	if err := only.Close(); err != nil {
		t.Fatal(err)
	}

	if err := other.Update(ctx, nop); err != nil {
		t.Fatalf("a write once the only writer closed: %v", err)
	}
	late, err := Open(ctx, path, Options{OnlyWriter: true})
	if err != nil {
		t.Fatalf("an only writer beside a handle that writes: %v", err)
	}
	defer late.Close()
	if late.KeepsRows() {
		t.Fatal("an only writer beside another writer keeps rows it would not see change")
	}
	if err := late.Update(ctx, nop); err != nil {
		t.Fatalf("its write: %v", err)
	}
	if err := other.Update(ctx, nop); err != nil {
		t.Fatalf("the other handle's write beside it: %v", err)
	}
}

// TestOnlyWriterKnowsTheLogSize: the only writer answers LogSize from
// its own commits without reading the file, and the answer is the file's:
// after each commit, plain, early or lazy, it equals what another handle
// reads, and LogHead's size with it.
func TestOnlyWriterKnowsTheLogSize(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kin.db")
	only, err := Open(ctx, path, Options{OnlyWriter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	other, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	check := func(what string) {
		t.Helper()
		got, err := only.LogSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, err := other.LogSize(ctx)
		if err != nil {
			t.Fatal(err)
		}
		head, _, err := only.LogHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != want || head != want || want == 0 {
			t.Fatalf("after %s: LogSize %d, LogHead %d, the file's %d", what, got, head, want)
		}
	}
	for i := range 3 {
		earlyAgent(ctx, t, only, fmt.Sprintf("plain-%d", i)) // its durable is not waited for: the size is the commit's
		check("an early commit")
	}
	now := time.Now().UTC()
	if err := only.UpdateLazy(ctx, func(tx store.Tx) error {
		return store.AppendEvent(ctx, tx, now, kin.EventAgentRegistered, 1, 0, kin.AgentRegisteredData{Agent: 1, Name: "lazy"})
	}); err != nil {
		t.Fatal(err)
	}
	check("a lazy commit")
	if err := only.Update(ctx, func(tx store.Tx) error {
		for range 5 {
			if err := store.AppendEvent(ctx, tx, now, kin.EventAgentRegistered, 1, 0, kin.AgentRegisteredData{Agent: 1, Name: "five"}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("a durable commit of five")
}
