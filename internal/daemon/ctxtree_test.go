package daemon_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGoldenTreeTwoAgents is the whole agent filesystem a real two-agent
// session leaves: coder spawns reviewer rev-123 with seed 001's handoff,
// waits for its result, and keeps running. Every entry is listed with its
// mode and owner (kin, coder or rev-123 for their uids), and the content of
// the files whose content does not depend on time or pids.
func TestGoldenTreeTwoAgents(t *testing.T) {
	f := runFamily(t, "reviewer", true)
	who := map[string]string{
		"0":                       "kin",
		uidOf(f.d, f.coder.ID):    "coder",
		uidOf(f.d, f.child):       "rev-123",
		strconv.Itoa(os.Getuid()): "kin",
	}
	shown := map[string]bool{"life": true, "parent": true, "status": true, "label": true, "state": true,
		"agent": true, "session": true, "uid": true, "gid": true, "groups": true, "root": true, "iso": true, "cwd": true, "mount": true, "policy": true}
	var b strings.Builder
	err := filepath.WalkDir(f.ctx, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.ctx, p)
		if rel == "bin" {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		owner := who[strconv.Itoa(int(st.Uid))] + ":" + who[strconv.Itoa(int(st.Gid))]
		line := fmt.Sprintf("%s %s %s", fi.Mode(), owner, normalize(f, rel))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		if fi.Mode().IsRegular() && (shown[e.Name()] || filepath.Dir(rel) == "agent") {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
				if l != "" {
					b.WriteString("  | " + normalize(f, l) + "\n")
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "testdata/ctx-two-agents.txt", sortPolicyLines(b.String()))
}

// normalize replaces what differs from run to run: the temporary folders,
// and the agents' uids.
func normalize(f *family, s string) string {
	bin, _ := kintest.AgentBinaryPath()
	return strings.NewReplacer(
		f.ctx, "$CTX", f.work, "$WORK", filepath.Dir(bin), "$AGENTBIN", filepath.Dir(f.kidOut), "$KIDOUT",
		uidOf(f.d, f.coder.ID), "<uid:coder>", uidOf(f.d, f.child), "<uid:rev-123>",
	).Replace(s)
}

// sortPolicyLines sorts the mount file's lines and the policy's keys again
// after normalize: they are sorted by path, which normalize reorders.
func sortPolicyLines(s string) string {
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		switch {
		case strings.HasSuffix(lines[i], "/mount"):
			j := i + 1
			for j < len(lines) && strings.HasPrefix(lines[j], "  | ") {
				j++
			}
			slices.Sort(lines[i+1 : j])
		case strings.HasSuffix(lines[i], "/policy") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  | {"):
			var v any
			if json.Unmarshal([]byte(lines[i+1][4:]), &v) == nil {
				b, _ := json.Marshal(v)
				lines[i+1] = "  | " + string(b)
			}
		}
	}
	return strings.Join(lines, "\n")
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update after checking the change):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// TestTreeFollowsTheStoreAcrossKill9: the daemon is killed while its
// writer is behind (hundreds of registrations and status changes just
// committed). The next daemon finishes the work: every agent's control
// files say what the store says, no temporary file is left, and each
// events.jsonl holds its agent's events once each, in order.
func TestTreeFollowsTheStoreAcrossKill9(t *testing.T) {
	home := kintest.TempHome(t)
	proc := startDaemonProcess(t, home)
	c, err := client.New(client.Config{Socket: filepath.Join(home, daemon.SocketName)})
	if err != nil {
		t.Fatal(err)
	}
	var running []*kin.Agent
	for i := range 3 {
		running = append(running, spawnAgent(t, c, fmt.Sprintf("worker-%d", i), 0, "sleep"))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				c.Register(ctx, kin.RegisterRequest{Name: fmt.Sprintf("r%d-%d", w, i), Responsible: "ops@example.org"})
			}
		}()
	}
	for range 10 {
		for _, a := range running {
			c.SetStatus(ctx, kin.StatusRequest{ID: a.ID, Action: kin.ActionSuspend})
			c.SetStatus(ctx, kin.StatusRequest{ID: a.ID, Action: kin.ActionResume})
		}
	}
	wg.Wait()
	c.Close()
	proc.Process.Signal(syscall.SIGKILL)
	proc.Wait()

	d := kintest.StartDaemon(t, kintest.WithHome(home))
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(home, "ctx")
	kintest.WaitFor(t, 60*time.Second, "the tree to catch up with the store", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, ".kin-synced"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n >= st.LastEvent
	})
	agents, err := d.Client.Agents(ctx, kin.AgentFilter{})
	if err != nil || len(agents) != 203 {
		t.Fatalf("%d agents, %v", len(agents), err)
	}
	for _, a := range agents {
		var meta kin.Agent
		b, err := os.ReadFile(filepath.Join(root, "agent", a.Name+".d", "meta.json"))
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil || meta.ID != a.ID || meta.Status != a.Status {
			t.Fatalf("%s: meta.json %+v, %v; the store says %+v", a.Name, meta, err, a)
		}
		if got := readFile(t, filepath.Join(root, "agent", a.Name+".d", "status")); got != string(a.Status)+"\n" {
			t.Fatalf("%s: status file %q, store %q", a.Name, got, a.Status)
		}
	}
	for _, a := range running {
		var want []int64
		for _, ev := range events(t, d.Client, kin.EventFilter{Agent: a.ID}) {
			if ev.Agent == a.ID && ev.Seq <= st.LastEvent {
				want = append(want, ev.Seq)
			}
		}
		var got []int64
		path := filepath.Join(root, "home", uidOf(d, a.ID), "agent", a.Name, "session", "default", "events.jsonl")
		for _, l := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
			var ev struct{ Seq int64 }
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("%s: %q: %v", path, l, err)
			}
			if ev.Seq <= st.LastEvent {
				got = append(got, ev.Seq)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s events.jsonl seqs %v, store %v", a.Name, got, want)
		}
	}
	// Nothing the killed daemon was writing is left once the new one has
	// started (its own writes in flight carry its own tag: look once it
	// has stopped).
	d.Close()
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && strings.Contains(e.Name(), ".kin-") && e.Name() != ".kin-synced" {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// TestTreeIsRebuiltAfterTheMachineRestarts: kin does not sync the tree's
// files one by one, so a crash of the machine may leave some empty. A
// daemon that starts on another boot than the one the tree was written on
// rewrites every file from the store; on the same boot it trusts its
// progress file.
func TestTreeIsRebuiltAfterTheMachineRestarts(t *testing.T) {
	home := kintest.TempHome(t)
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	a := spawnAgent(t, d.Client, "rebuilt", 0, "sleep")
	reg, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "registered-only", Responsible: "ops@example.org"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(home, "ctx")
	kintest.WaitFor(t, 30*time.Second, "the tree to catch up with the store", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, ".kin-synced"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n >= st.LastEvent
	})
	uid := uidOf(d, a.ID)
	served := d.ServedControl()
	d.Close()

	// What a power loss may leave: files that are there but empty. Served
	// control files (ctxfuse) are not on the disk: they are answered from
	// the store, which is the record, and checked below all the same.
	var damaged []string
	if !served {
		damaged = append(damaged,
			filepath.Join(root, "agent", "rebuilt.d", "status"),
			filepath.Join(root, "agent", "rebuilt.d", "meta.json"),
			filepath.Join(root, "agent", "registered-only.d", "meta.json"))
	}
	damaged = append(damaged,
		filepath.Join(root, "home", uid, "agent", "rebuilt", "session", "default", "state"),
		filepath.Join(root, "home", uid, "agent", "rebuilt", "session", "default", "events.jsonl"))
	truncate := func() {
		for _, p := range damaged {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(d *kintest.Daemon, wantRebuilt bool) {
		t.Helper()
		st, err := d.Client.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kintest.WaitFor(t, 30*time.Second, "the tree to catch up with the store", func() bool {
			b, _ := os.ReadFile(filepath.Join(root, ".kin-synced"))
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n >= st.LastEvent
		})
		for _, p := range damaged {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if rebuilt := len(b) > 0; rebuilt != wantRebuilt {
				t.Errorf("%s: %d bytes; want it rebuilt: %v", p, len(b), wantRebuilt)
			}
		}
		for _, ag := range []*kin.Agent{a, reg} {
			got, err := d.Client.Agent(ctx, ag.ID)
			if err != nil {
				t.Fatal(err)
			}
			var meta kin.Agent
			if b, err := os.ReadFile(filepath.Join(root, "agent", ag.Name+".d", "meta.json")); err == nil && len(b) > 0 {
				if err := json.Unmarshal(b, &meta); err != nil || meta.ID != got.ID || meta.Status != got.Status {
					t.Errorf("%s: meta.json %+v, %v; the store says %+v", ag.Name, meta, err, got)
				}
			} else if served {
				t.Errorf("%s: served meta.json: %q, %v", ag.Name, b, err)
			}
		}
	}

	// The same boot: the progress file is trusted (a crash of the daemon
	// loses nothing the page cache holds).
	truncate()
	d = kintest.StartDaemon(t, kintest.WithHome(home))
	check(d, false)
	d.Close()

	// Another boot: everything is rewritten from the store.
	if err := os.WriteFile(filepath.Join(home, "ctx-boot"), []byte("00000000-0000-0000-0000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d = kintest.StartDaemon(t, kintest.WithHome(home))
	check(d, true)
	if got := readFile(t, filepath.Join(root, "home", uid, "agent", "rebuilt", "session", "default", "state")); got == "" {
		t.Errorf("the session's state was not rewritten")
	}
}
