package agentlog_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kin-agents/kin/internal/agentlog"
)

// TestTrim: the logs given newest first keep their newest files within the
// budget; once one does not fit, it and every older file go, so no log
// keeps an older file than one it lost. Links and the pipe are not files
// of the log.
func TestTrim(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Agent 3 ended last: 30 + 60; agent 2: 30 + 60 + 60; agent 1: 10.
	write("3.log", 30)
	write("3.log.1", 60)
	write("2.log", 30)
	write("2.log.1", 60)
	write("2.log.2", 60)
	write("2.log.pipe", 1000)
	write("1.log", 10)
	if err := os.Symlink(filepath.Join(dir, "1.log"), filepath.Join(dir, "4.log")); err != nil {
		t.Fatal(err)
	}
	if got := agentlog.Files(filepath.Join(dir, "2.log")); len(got) != 3 || got[0].Size != 30 || got[2].Path != filepath.Join(dir, "2.log.2") {
		t.Fatalf("Files(2.log) = %v", got)
	}
	paths := []string{filepath.Join(dir, "3.log"), filepath.Join(dir, "4.log"), filepath.Join(dir, "2.log"), filepath.Join(dir, "1.log")}
	kept, removed, err := agentlog.Trim(paths, 150)
	if err != nil {
		t.Fatal(err)
	}
	// 3.log, 3.log.1 and 2.log fit (120); 2.log.1 does not, so it, 2.log.2
	// and 1.log go although 1.log's 10 bytes would fit.
	if kept != 120 || removed != 130 {
		t.Fatalf("kept %d, removed %d; want 120 and 130", kept, removed)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"2.log", "2.log.pipe", "3.log", "3.log.1", "4.log"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	// Within the budget nothing goes.
	if _, removed, _ := agentlog.Trim(paths, 1<<20); removed != 0 {
		t.Fatalf("removed %d within the budget", removed)
	}
}
