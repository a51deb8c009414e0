package fleettest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// sharedDir is a directory every agent's uid may read, for files a test
// hands its agents; removed when t ends.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kincross-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// logCollector gathers a followed log's bytes.
type logCollector struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logCollector) write(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(b)
	return nil
}

func (l *logCollector) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestLogsFromAnyHost: an agent's log is kept by the host that runs it
// (b), and read from any host (a, c) through b's API, followed too; the
// reading host checks its own caller; with b down, the read fails naming b
// and its lease.
func TestLogsFromAnyHost(t *testing.T) {
	f := fleettest.Start(t, fenceArgs())
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")
	ctx := context.Background()
	dir := sharedDir(t)
	gate := filepath.Join(dir, "go-on")

	root := spawnOn(t, a, "root", 0, time.Second, "sleep", "3600")
	other := spawnOn(t, a, "other", 0, time.Second, "sleep", "3600")
	// The writer runs on b (spawned through b's API): it writes a line,
	// waits for the test's gate, writes another and ends.
	writer := spawnOn(t, b, "writer", root.ID, time.Second, "sh", "-c",
		`echo first-line-on-b; while [ ! -e "$0" ]; do sleep 0.05; done; echo second-line-on-b`, gate)
	if writer.Host != "b" {
		t.Fatalf("writer's host %q, want b", writer.Host)
	}

	// Followed from a while it runs: the first line arrives before the
	// second is written, and the stream ends once the agent has ended.
	var got logCollector
	done := make(chan error, 1)
	go func() { done <- a.Client.Logs(ctx, kin.LogsRequest{ID: writer.ID, Follow: true}, got.write) }()
	kintest.WaitFor(t, 30*time.Second, "the first line followed from host a", func() bool {
		return strings.Contains(got.String(), "first-line-on-b")
	})
	if strings.Contains(got.String(), "second") {
		t.Fatalf("followed %q before the gate opened", got.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow from a: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("follow from a has not ended 60 s after the writer was let go; so far %q", got.String())
	}
	if want := "first-line-on-b\nsecond-line-on-b\n"; got.String() != want {
		t.Errorf("followed from a: %q, want %q", got.String(), want)
	}

	// Read from c with the CLI, and from b itself: the same bytes.
	if out := c.Exec(t, "logs", writer.ID.String()); out != "first-line-on-b\nsecond-line-on-b\n" {
		t.Errorf("kin logs on c: %q", out)
	}
	if out := c.Exec(t, "logs", writer.ID.String(), "--follow", "--offset", "16"); out != "second-line-on-b\n" {
		t.Errorf("kin logs --follow --offset 16 on c: %q", out)
	}
	if out := b.Exec(t, "logs", writer.ID.String()); out != "first-line-on-b\nsecond-line-on-b\n" {
		t.Errorf("kin logs on b: %q", out)
	}

	// The host asked checks its caller: the writer's parent (on a) may
	// read it; another agent may not, and b is never asked.
	var viaParent logCollector
	if err := a.Client.ActingAs(root.ID.String()).Logs(ctx, kin.LogsRequest{ID: writer.ID}, viaParent.write); err != nil || viaParent.String() == "" {
		t.Errorf("the writer's parent reading its log through a: %q, %v", viaParent.String(), err)
	}
	err := a.Client.ActingAs(other.ID.String()).Logs(ctx, kin.LogsRequest{ID: writer.ID}, func([]byte) error { return nil })
	if kin.ErrorCodeOf(err) != kin.ECodeForbidden {
		t.Errorf("another agent reading the writer's log through a: %v, want forbidden", err)
	}

	// b down: a names b and its lease.
	b.Kill9(t)
	kintest.WaitFor(t, 30*time.Second, "b's lease expired, as a sees it", func() bool {
		hs, err := a.Client.Hosts(ctx)
		if err != nil {
			return false
		}
		for _, h := range hs {
			if h.Name == "b" {
				return !h.Live
			}
		}
		return false
	})
	out, err := a.Kin("logs", writer.ID.String())
	if err == nil {
		t.Fatalf("kin logs on a with b down succeeded: %q", out)
	}
	for _, want := range []string{"on host b", "which is down", "lease expired"} {
		if !strings.Contains(out, want) {
			t.Errorf("kin logs on a with b down: %q lacks %q", out, want)
		}
	}
	err = a.Client.Logs(ctx, kin.LogsRequest{ID: writer.ID}, func([]byte) error { return nil })
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeUnavailable {
		t.Errorf("Logs through a with b down: %v, want unavailable", err)
	}
}
