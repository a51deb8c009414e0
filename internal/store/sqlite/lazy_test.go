package sqlite

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// lazyHelper is the process TestLazyUpdateSurvivesKill9 kills: it
// registers an agent (a durable Update), records its pid with UpdateLazy,
// says "done" and waits to be killed.
func lazyHelper(path string, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		return err
	}
	var id kin.AgentID
	now := time.Now().UTC()
	if err := s.Update(ctx, func(tx store.Tx) error {
		a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: kin.Agent{Name: "lazy", Status: kin.StatusActive, State: kin.StateRegistered, Life: kin.LifeOwned, CreatedAt: now, UpdatedAt: now}})
		if err != nil {
			return err
		}
		id = a.ID
		return store.AppendEvent(ctx, tx, now, kin.EventAgentRegistered, a.ID, 0, kin.AgentRegisteredData{Agent: a.ID, Name: a.Name})
	}); err != nil {
		return err
	}
	pid, started := 4242, now
	if err := s.UpdateLazy(ctx, func(tx store.Tx) error {
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: id, At: now, PID: &pid, StartedAt: &started}); err != nil {
			return err
		}
		return store.AppendEvent(ctx, tx, now, kin.EventAgentStarted, id, 0, kin.AgentStartedData{Agent: id, PID: pid})
	}); err != nil {
		return err
	}
	if s.syncNow != "NORMAL" {
		return fmt.Errorf("a lazy batch alone committed with synchronous=%s", s.syncNow)
	}
	fmt.Fprintln(out, "done")
	bufio.NewReader(in).ReadString('\n') // until killed
	return nil
}

// TestLazyUpdateSurvivesKill9: what UpdateLazy returned for is in the
// database after a kill -9 of the process (it commits; it only skips the
// sync), and the next Update commits durably again.
func TestLazyUpdateSurvivesKill9(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kin.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=lazy", helperArgs+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "done" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true

	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	agents, err := s.AgentList(ctx, kin.AgentFilter{})
	if err != nil || len(agents) != 1 || agents[0].PID != 4242 {
		t.Fatalf("after kill -9: %d agents, %v; want the lazily recorded pid 4242 (%+v)", len(agents), err, agents)
	}
	evs, err := s.EventList(ctx, kin.EventFilter{})
	if err != nil || len(evs) != 2 || evs[1].Type != kin.EventAgentStarted {
		t.Fatalf("after kill -9: events %v, %v; want registered then started", evs, err)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateLazy(ctx, func(tx store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s.syncNow != "NORMAL" {
		t.Fatalf("a lazy batch alone: synchronous=%s", s.syncNow)
	}
	if err := s.Update(ctx, func(tx store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s.syncNow != "FULL" {
		t.Fatalf("a durable Update after a lazy one committed with synchronous=%s", s.syncNow)
	}
}
