package sqlite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// helperEnv turns the test binary into a helper process instead of running
// tests: "append" is the second process of TestSecondProcessAppends, with
// its appenderArgs as JSON in helperArgs.
const (
	helperEnv  = "KIN_SQLITE_TEST_HELPER"
	helperArgs = "KIN_SQLITE_TEST_ARGS"
)

// TestMain runs the helper when asked to; else the tests, then removes the
// database BenchmarkLogVerify1M builds once per process.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "lazy" {
		if err := lazyHelper(os.Getenv(helperArgs), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "lazy:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(helperEnv) == "append" {
		if err := appender(os.Getenv(helperArgs), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "appender:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if verify1M.dir != "" {
		os.RemoveAll(verify1M.dir)
	}
	os.Exit(code)
}

// appenderArgs says what the second process appends: storetest.LogEvent
// From, From+1, ... in Updates of PerUpdate events each, Updates in all.
type appenderArgs struct {
	Path                     string
	From, Updates, PerUpdate int
}

// appender opens the store, appends one Update and says "first", waits for
// a line on in, appends the rest and says "done".
func appender(argJSON string, in io.Reader, out io.Writer) error {
	var a appenderArgs
	if err := json.Unmarshal([]byte(argJSON), &a); err != nil {
		return err
	}
	s, err := Open(context.Background(), a.Path, Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	next := a.From
	appendOne := func() error {
		defer func() { next += a.PerUpdate }()
		return s.Update(ctx, func(tx store.Tx) error {
			for i := next; i < next+a.PerUpdate; i++ {
				e, err := storetest.NewLogEvent(i)
				if err == nil {
					_, err = tx.EventAppend(ctx, e)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := appendOne(); err != nil {
		return err
	}
	fmt.Fprintln(out, "first")
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return err
	}
	for range a.Updates - 1 {
		if err := appendOne(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "done")
	return s.Close()
}

// TestSecondProcessAppends has a real second process (this test binary
// again) append to the same file while this one does: the waiter of this
// process wakes for the other's commit (data_version polling), every
// event of both is stored once with gapless seqs, and the log verifies.
func TestSecondProcessAppends(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kin.db")
	s := openLog(t, path)
	_, v := testKey(t)
	const childFrom, childUpdates, perUpdate = 100_000, 40, 3
	args, _ := json.Marshal(appenderArgs{Path: path, From: childFrom, Updates: childUpdates, PerUpdate: perUpdate})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), helperEnv+"=append", helperArgs+"="+string(args))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	wake := s.Wait() // before the other process commits anything
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "first" {
		t.Fatalf("the second process said %q, not first (stderr: %s)", lines.Text(), stderr.String())
	}
	deadline := time.NewTimer(10 * time.Second)
	select {
	case <-wake:
	case <-deadline.C:
		t.Fatal("this process's waiter was not woken within 10s of the other process's commit")
	}
	deadline.Stop()

	// Both processes append at once now.
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	const writers, updates = 4, 10
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range updates {
				from := int(next.Add(perUpdate)) - perUpdate
				if _, err := appendEvents(t, s, from, from+perUpdate, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !lines.Scan() || lines.Text() != "done" {
		t.Errorf("the second process said %q, not done", lines.Text())
	}
	err = cmd.Wait()
	waited = true
	if err != nil {
		t.Fatalf("the second process: %v (stderr: %s)", err, stderr.String())
	}
	if t.Failed() {
		t.FailNow()
	}

	var stored []kin.Event
	mine, theirs := 0, 0
	err = s.LogEntries(context.Background(), func(en auditlog.Entry) error {
		stored = append(stored, en.Event)
		var d struct{ N int }
		if err := json.Unmarshal(en.Event.Data, &d); err != nil {
			return err
		}
		if d.N >= childFrom {
			theirs++
		} else {
			mine++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if mine != writers*updates*perUpdate || theirs != childUpdates*perUpdate {
		t.Fatalf("%d events of this process and %d of the other stored; want %d and %d", mine, theirs, writers*updates*perUpdate, childUpdates*perUpdate)
	}
	checkHead(t, s, stored) // gapless, and LogHead has the other's appends
	wantOK(t, verify(t, s, v, nil), int64(len(stored)), 0)
}
