package storeopen

import (
	"context"
	"go/build"
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

// TestOnlyStoreopenPicksDrivers: the daemon and the CLI reach drivers only
// through this package (their tests may open one directly).
func TestOnlyStoreopenPicksDrivers(t *testing.T) {
	for _, dir := range []string{"../../daemon", "../../cli"} {
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, driver := range []string{"github.com/kin-agents/kin/internal/store/sqlite"} {
			if slices.Contains(pkg.Imports, driver) {
				t.Errorf("package %s imports %s: open stores through storeopen", pkg.ImportPath, driver)
			}
		}
	}
}
