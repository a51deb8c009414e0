package main

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/kin-agents/kin/internal/kintest"
)

// kinOut runs kin with args and returns its stdout and exit status.
func kinOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := kinCommand(t, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitCode(t, cmd.Run())
	if code != 0 && code != 5 {
		t.Logf("kin %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String(), code
}

// serveKin starts kin serve on home and returns a function that stops it
// with SIGTERM and waits for the clean shutdown.
func serveKin(t *testing.T, home string) (stop func()) {
	t.Helper()
	s := startServe(t, home)
	return func() {
		if code := s.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("kin serve exited %d after SIGTERM:\n%s", code, s.stderr.String())
		}
	}
}

// TestAuditEndToEnd runs the README's "Audit" commands with the real
// binary: a checkpoint kept before a restart still verifies after it; a
// chain proof and an export verify with nothing but the log key, the export
// with no daemon running; a changed export and a changed database copy fail
// at the changed event's index.
func TestAuditEndToEnd(t *testing.T) {
	home := kintest.TempHome(t)
	work := t.TempDir()
	stop := serveKin(t, home)
	h := []string{"--home", home}
	reg := func(args ...string) {
		t.Helper()
		if out, code := kinOut(t, append(append([]string{"register"}, h...), args...)...); code != 0 {
			t.Fatalf("register %v: exit %d %s", args, code, out)
		}
	}
	reg("--name", "Research-Coordinator", "--role", "coordinator", "--responsible", "Dr. Schmidt")
	reg("--name", "Report-Writer", "--role", "writer", "--parent", "1")
	reg("--name", "LaTeX-Formatter", "--role", "formatter", "--parent", "2")
	key, code := kinOut(t, append([]string{"log", "key"}, h...)...)
	key = strings.TrimSpace(key)
	if code != 0 || !strings.Contains(key, "/log/") {
		t.Fatalf("kin log key: %q (exit %d)", key, code)
	}
	cp, code := kinOut(t, append([]string{"log", "checkpoint"}, h...)...)
	if code != 0 || !strings.Contains(cp, "\n\n— ") {
		t.Fatalf("kin log checkpoint: %q (exit %d)", cp, code)
	}
	cpFile := filepath.Join(work, "cp.txt")
	os.WriteFile(cpFile, []byte(cp), 0o644)
	reg("--name", "Peer-Reviewer", "--role", "reviewer", "--parent", "1")

	chain, code := kinOut(t, append([]string{"ancestors", "3", "--proof"}, h...)...)
	if code != 0 {
		t.Fatalf("kin ancestors --proof: exit %d", code)
	}
	chainFile := filepath.Join(work, "chain.json")
	os.WriteFile(chainFile, []byte(chain), 0o644)
	exp := filepath.Join(work, "export")
	if out, code := kinOut(t, append([]string{"log", "export", exp}, h...)...); code != 0 {
		t.Fatalf("kin log export: exit %d %s", code, out)
	}
	stop() // everything below runs with no daemon

	out, code := kinOut(t, "log", "verify-proof", chainFile, "--key", key)
	if code != 0 || !strings.Contains(out, "#3 LaTeX-Formatter (gen 2) responsible: Dr. Schmidt") || !strings.Contains(out, "#1 Research-Coordinator (gen 0)") {
		t.Fatalf("verify-proof of the chain: exit %d\n%s", code, out)
	}
	if out, code := kinOut(t, "log", "verify-export", exp, "--key", key); code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Fatalf("verify-export with no daemon: exit %d\n%s", code, out)
	}
	db := filepath.Join(home, "kin.db")
	if out, code := kinOut(t, "log", "verify", "--db", db, "--key", key, "--from-checkpoint", cpFile); code != 0 || !strings.Contains(out, "consistency proof") {
		t.Fatalf("verify --db with the kept checkpoint: exit %d\n%s", code, out)
	}

	// Another log's key proves nothing.
	other := kintest.TempHome(t)
	stopOther := serveKin(t, other)
	kinOut(t, "register", "--home", other, "--name", "x", "--role", "r", "--responsible", "y")
	otherKey, _ := kinOut(t, "log", "key", "--home", other)
	stopOther()
	if out, code := kinOut(t, "log", "verify-export", exp, "--key", strings.TrimSpace(otherKey)); code != 5 || !strings.Contains(out, "not signed by the log key") {
		t.Fatalf("verify-export with another log's key: exit %d\n%s", code, out)
	}

	// A changed export fails, from the first leaf no matching checkpoint
	// covers (an export has no per-leaf hashes to pin it further).
	events := filepath.Join(exp, "events.jsonl")
	b, _ := os.ReadFile(events)
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = strings.Replace(lines[1], "Report-Writer", "Report-Wr1ter", 1)
	os.WriteFile(events, []byte(strings.Join(lines, "")), 0o644)
	if out, code := kinOut(t, "log", "verify-export", exp, "--key", key); code != 5 || !strings.Contains(out, "at leaf index 0 ") || !strings.Contains(out, "differs from what was signed") {
		t.Fatalf("verify-export of a changed export: exit %d\n%s", code, out)
	}
	out, code = kinOut(t, "log", "verify-proof", chainFile, "--key", key)
	if code != 0 {
		t.Fatalf("the chain proof is its own evidence and still holds: exit %d\n%s", code, out)
	}
	tampered := strings.Replace(chain, "Dr. Schmidt", "Dr. Nobody", 1)
	os.WriteFile(chainFile, []byte(tampered), 0o644)
	if out, code := kinOut(t, "log", "verify-proof", chainFile, "--key", key); code != 5 {
		t.Fatalf("verify-proof of a chain whose summary lies: exit %d\n%s", code, out)
	}

	// A changed copy of the database fails at the changed event.
	copyDB := filepath.Join(work, "copy.db")
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(copyDB, data, 0o600)
	conn, err := sql.Open("sqlite", copyDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(`UPDATE events SET data = replace(data, '"generation":1', '"generation":0') WHERE seq = 2`); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if out, code := kinOut(t, "log", "verify", "--db", copyDB, "--key", key); code != 5 || !strings.Contains(out, "at leaf index 1 (event seq 2)") {
		t.Fatalf("verify --db of a changed copy: exit %d\n%s", code, out)
	}

	// After a restart, the checkpoint kept before it still verifies.
	serveKin(t, home)
	reg("--name", "After-Restart", "--role", "helper", "--parent", "1")
	if out, code := kinOut(t, append([]string{"log", "verify", "--from-checkpoint", cpFile}, h...)...); code != 0 || !strings.Contains(out, "consistency proof") {
		t.Fatalf("verify after a restart: exit %d\n%s", code, out)
	}
}
