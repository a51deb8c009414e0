package storeopen

import (
	"context"
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store/storetest"
)

func TestOpenEveryForm(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	events := map[string]int64{} // by file: "" and "sqlite" are one
	for _, dsn := range []string{"", "sqlite", "sqlite:" + filepath.Join(home, "a.db"), "sqlite://" + filepath.Join(home, "b.db")} {
		s, err := Open(ctx, dsn, Options{Home: home, Synchronous: "NORMAL"})
		if err != nil {
			t.Fatalf("Open(%q): %v", dsn, err)
		}
		want := map[string]string{"": "kin.db", "sqlite": "kin.db"}[dsn]
		if want == "" {
			want = filepath.Base(strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//"))
		}
		if got := s.Driver(); got != "sqlite:"+filepath.Join(home, want) {
			t.Errorf("Open(%q).Driver() = %q", dsn, got)
		}
		if _, err := storetest.AppendEvents(t, s, 0, 3, nil); err != nil {
			t.Fatal(err)
		}
		events[s.Driver()] += 3
		n := events[s.Driver()]
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		ro, err := OpenReadOnly(ctx, dsn, Options{Home: home})
		if err != nil {
			t.Fatalf("OpenReadOnly(%q): %v", dsn, err)
		}
		_, v := storetest.LogKey(t)
		rep, err := auditlog.Verify(ctx, ro, auditlog.VerifyOptions{Verifier: v})
		ro.Close()
		if err != nil || !rep.OK || rep.Events != n {
			t.Fatalf("verify %q read-only: %+v, %v", dsn, rep, err)
		}
	}
	for _, dsn := range []string{"postgres://u:hunter2@h/db", "mysql://x", "sqlite:"} {
		if s, err := Open(ctx, dsn, Options{Home: home}); err == nil {
			s.Close()
			t.Errorf("Open(%q) opened something", dsn)
		}
		if r, err := OpenReadOnly(ctx, dsn, Options{Home: home}); err == nil {
			r.Close()
			t.Errorf("OpenReadOnly(%q) opened something", dsn)
		}
	}
	if _, err := OpenReadOnly(ctx, "sqlite:"+filepath.Join(home, "missing.db"), Options{}); err == nil {
		t.Error("OpenReadOnly of a missing file succeeded (it must not create one)")
	}
}

// TestOnlyStoreopenPicksDrivers: no package of the module but this one
// imports a driver (their tests may open one directly), so the daemon, the
// CLI and the services split out of the daemon reach stores through
// storeopen and the store interfaces.
func TestOnlyStoreopenPicksDrivers(t *testing.T) {
	drivers := []string{"github.com/kin-agents/kin/internal/store/sqlite"}
	root := "../../.."
	checked := 0
	err := filepath.WalkDir(root, func(dir string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if name := e.Name(); dir != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			var none *build.NoGoError
			if errors.As(err, &none) {
				return nil
			}
			return err
		}
		checked++
		if dir == filepath.Join(root, "internal", "store", "storeopen") {
			return nil
		}
		for _, d := range drivers {
			if slices.Contains(pkg.Imports, d) {
				t.Errorf("%s imports %s: open stores through storeopen", dir, d)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d packages found under %s: the walk is not looking at the module", checked, root)
	}
}
