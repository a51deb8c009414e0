package fleettest_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/fleettest"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

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
	dir := kintest.SharedDir(t)
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

// seedFile reads one of seed 001's example files (the handoff package's
// test data).
func seedFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "handoff", "testdata", "seed001", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readFileT reads path, failing t.
func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHandoffAcrossHosts is seed 001's handoff with the child on host b
// and its parent on host a: a makes the child's folder in the parent's
// context/child/ while it runs; b checks the result the child wrote
// against the contract (computing its refs' hashes) and records the
// outcome; a fetches the checked copy and installs it, so the parent's
// folder holds what it holds on one host, owned by the parent. A result
// that breaks its contract is kept and marked on a as on one host.
func TestHandoffAcrossHosts(t *testing.T) {
	f := fleettest.Start(t)
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ctx := context.Background()
	dir := kintest.SharedDir(t)
	patch := seedFile(t, "patch.diff")
	for name, body := range map[string]string{
		"result.md": seedFile(t, "result.md"), "patch.diff": patch,
		"bad-result.md": "Summary:\nonly a summary\n",
		"refs.jsonl":    `{"path":"artifact/patch.diff","kind":"patch","summary":"suggested patch"}` + "\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gate := filepath.Join(dir, "go-on")

	coder := spawnOn(t, a, "coder", 0, time.Second, "sleep", "3600")
	// The child writes seed 001's result into its output/ once let go.
	write := `while [ ! -e "$1/go-on" ]; do sleep 0.05; done
mkdir -p "$KIN_OUTPUT/artifact" && cp "$1/$2" "$KIN_OUTPUT/result.md" && cp "$1/patch.diff" "$KIN_OUTPUT/artifact/" && cp "$1/refs.jsonl" "$KIN_OUTPUT/"`
	spawnChild := func(name, result string) *kin.Agent {
		t.Helper()
		g := kin.Duration(time.Second)
		ag, err := b.Client.Spawn(ctx, kin.SpawnRequest{
			RegisterRequest: kin.RegisterRequest{Name: name, Parent: coder.ID, Responsible: "fleettest"},
			Command:         []string{"sh", "-c", write, "sh", dir, result}, Grace: &g,
			Handoff: &kin.Handoff{Task: seedFile(t, "handoff.md"), Contract: []byte(seedFile(t, "contract.json"))},
			Host:    b.Name, // not its parent's host, where it would run by default
		})
		if err != nil {
			t.Fatalf("spawn %s on b: %v", name, err)
		}
		if ag.Host != "b" || ag.Result != kin.ResultRunning {
			t.Fatalf("%s: host %q, result %q; want b, running", name, ag.Host, ag.Result)
		}
		return ag
	}
	rev := spawnChild("rev-123", "result.md")
	bad := spawnChild("rev-bad", "bad-result.md")

	// On a, in the parent's session: the child's folder, running.
	var uidStart int
	if _, err := fmt.Sscanf(a.Info().AgentUIDRange, "%d:", &uidStart); err != nil {
		t.Fatalf("a's uid range %q: %v", a.Info().AgentUIDRange, err)
	}
	coderUID := uidStart + int(coder.ID)
	session := filepath.Join(a.Home, "ctx", "home", strconv.Itoa(coderUID), "agent", "coder", "session", coder.Session)
	childDir := filepath.Join(session, "context", "child", "rev-123")
	kintest.WaitFor(t, 30*time.Second, "rev-123's folder on a, running", func() bool {
		st, err := os.ReadFile(filepath.Join(childDir, "status"))
		return err == nil && string(st) == "running\n"
	})
	for name, want := range map[string]string{"agent": rev.ID.String() + "\n", "handoff.md": seedFile(t, "handoff.md")} {
		if got := readFileT(t, filepath.Join(childDir, name)); got != want {
			t.Errorf("a's %s = %q, want %q", name, got, want)
		}
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := a.Client.Wait(ctx, kin.WaitRequest{ID: rev.ID, Timeout: kin.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	// kin wait on a returns once the result is in the parent's folder.
	if res.Status != kin.ResultCompleted || len(res.Violations) != 0 || res.Dir != childDir || res.Result != seedFile(t, "result.md") || len(res.Refs) != 1 {
		t.Errorf("a: result = %+v", res)
	}
	sum := sha256.Sum256([]byte(patch))
	wantHash := "sha256:" + hex.EncodeToString(sum[:])
	for name, want := range map[string]string{
		"status": "completed\n", "session": rev.Session + "\n", "result.md": seedFile(t, "result.md"), "artifact/patch.diff": patch,
		"refs.jsonl": `{"path":"artifact/patch.diff","hash":"` + wantHash + `","kind":"patch","summary":"suggested patch"}` + "\n",
	} {
		if got := readFileT(t, filepath.Join(childDir, name)); got != want {
			t.Errorf("a's context/child/rev-123/%s = %q, want %q", name, got, want)
		}
	}
	filepath.Walk(childDir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && int(fi.Sys().(*syscall.Stat_t).Uid) != coderUID {
			t.Errorf("%s is uid %d's, not the parent's (%d)", p, fi.Sys().(*syscall.Stat_t).Uid, coderUID)
		}
		return nil
	})
	// b, which checked it, keeps the same result; the store says the same
	// on every host.
	resB, err := b.Client.Result(ctx, rev.ID)
	if err != nil || resB.Status != kin.ResultCompleted || resB.Result != res.Result || len(resB.Refs) != 1 || resB.Refs[0].Hash != wantHash {
		t.Errorf("b: result = %+v, %v", resB, err)
	}
	pack, err := a.Client.ContextPack(ctx, coder.ID)
	if err != nil || !strings.Contains(pack.Text, "The mount ABI is mostly clear") {
		t.Errorf("a: the parent's context pack lacks the child's result: %v\n%s", err, pack.Text)
	}

	// A result that breaks its contract: kept and marked, as on one host.
	res, err = a.Client.Wait(ctx, kin.WaitRequest{ID: bad.ID, Timeout: kin.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	badDir := filepath.Join(session, "context", "child", "rev-bad")
	if res.Status != kin.ResultContractViolated || res.Dir != badDir || !strings.Contains(strings.Join(res.Violations, "\n"), "Findings") {
		t.Errorf("a: rev-bad's result = %+v", res)
	}
	if got := readFileT(t, filepath.Join(badDir, "status")); got != "contract_violated\n" {
		t.Errorf("a: rev-bad's status = %q", got)
	}
	if got := readFileT(t, filepath.Join(badDir, "result.md")); got != "Summary:\nonly a summary\n" {
		t.Errorf("a: rev-bad's result.md = %q", got)
	}
}

// TestMessagesAcrossHosts: messages between agents on different hosts go
// through the store (the Bus): an agent on a sends to its child on b; b's
// inbox (the API, followed too) has it, and b writes it into the child's
// messages.jsonl, where the child's process reads it; the child answers,
// and a writes the answer into the parent's.
func TestMessagesAcrossHosts(t *testing.T) {
	f := fleettest.Start(t)
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ctx := context.Background()

	parent := spawnOn(t, a, "parent", 0, time.Second, "sleep", "3600")
	// The child waits for its parent's message in its session's
	// messages.jsonl, and says so in its log.
	child := spawnOn(t, b, "child", parent.ID, time.Second, "sh", "-c",
		`until grep -q hello-from-a "$KIN_SESSION/messages.jsonl" 2>/dev/null; do sleep 0.05; done; echo got-hello; sleep 3600`)

	// b's inbox, followed from before the message is sent.
	followCtx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan kin.Message, 4)
	go b.Client.ActingAs(child.ID.String()).Inbox(followCtx, kin.InboxRequest{Follow: true}, func(m kin.Message) error {
		got <- m
		return nil
	})
	sent, err := a.Client.ActingAs(parent.ID.String()).Send(ctx, kin.SendRequest{To: child.ID.String(), Text: "hello-from-a"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.From != parent.ID || m.To != child.ID || m.Text != "hello-from-a" || m.Seq != sent.Seq {
			t.Errorf("b's inbox followed: %+v, want %+v", m, sent)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b's followed inbox did not get the message from a within 30 s")
	}
	var inbox []kin.Message
	if err := b.Client.Inbox(ctx, kin.InboxRequest{Agent: child.ID}, func(m kin.Message) error { inbox = append(inbox, m); return nil }); err != nil || len(inbox) != 1 || inbox[0].Text != "hello-from-a" {
		t.Errorf("b's inbox of the child: %+v, %v", inbox, err)
	}
	// The child's process read it from its messages.jsonl on b (its log,
	// read through a, says so).
	kintest.WaitFor(t, 30*time.Second, "the child on b read the message in its messages.jsonl", func() bool {
		var log logCollector
		a.Client.Logs(ctx, kin.LogsRequest{ID: child.ID}, log.write)
		return strings.Contains(log.String(), "got-hello")
	})

	// The answer, from b to the parent on a: a's inbox and the parent's
	// messages.jsonl on a.
	if _, err := b.Client.ActingAs(child.ID.String()).Send(ctx, kin.SendRequest{To: parent.ID.String(), Text: "answer-from-b"}); err != nil {
		t.Fatal(err)
	}
	var uidStart int
	if _, err := fmt.Sscanf(a.Info().AgentUIDRange, "%d:", &uidStart); err != nil {
		t.Fatal(err)
	}
	msgs := filepath.Join(a.Home, "ctx", "home", strconv.Itoa(uidStart+int(parent.ID)), "agent", "parent", "session", parent.Session, "messages.jsonl")
	kintest.WaitFor(t, 30*time.Second, "the answer in the parent's messages.jsonl on a", func() bool {
		b, err := os.ReadFile(msgs)
		return err == nil && strings.Contains(string(b), `"text":"answer-from-b"`) && strings.Contains(string(b), `"role":"agent:`+child.ID.String()+`"`)
	})
	inbox = nil
	if err := a.Client.ActingAs(parent.ID.String()).Inbox(ctx, kin.InboxRequest{}, func(m kin.Message) error { inbox = append(inbox, m); return nil }); err != nil || len(inbox) != 1 || inbox[0].From != child.ID {
		t.Errorf("a's inbox of the parent: %+v, %v", inbox, err)
	}
}

// metricOf is the value of the sample name{label="value"} in Prometheus
// text, and whether there is one.
func metricOf(text, name, label, value string) (string, bool) {
	prefix := name + "{" + label + `="` + value + `"} `
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v, true
		}
	}
	return "", false
}

// scrapeMetrics GETs h's /metrics over its HTTP address with its token.
func scrapeMetrics(t *testing.T, h *fleettest.Host) string {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+h.HTTP+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %s, %v", h.Name, resp.Status, err)
	}
	return string(b)
}

// TestFleetSeenFromAnyHost: kin events (followed too) and /metrics on one
// host show the whole fleet, with each agent's host: the events of an
// agent spawned on b, followed on c, name b; c's /metrics counts each
// host's agents and says which hosts are up.
func TestFleetSeenFromAnyHost(t *testing.T) {
	f := fleettest.Start(t, fenceArgs())
	a, b, c := f.Host(t, "a"), f.Host(t, "b"), f.Host(t, "c")

	// kin events --follow on c, from before b's spawn.
	cmd := c.Command(f.Bin, "--home", c.Home, "events", "--follow", "--type", kin.EventAgentStarted)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	root := spawnOn(t, a, "root", 0, time.Second, "sleep", "3600")
	kid := spawnOn(t, b, "kid", root.ID, time.Second, "sleep", "3600")
	want := map[kin.AgentID]string{root.ID: "host=a", kid.ID: "host=b"}
	deadline := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kin events --follow on c ended; still waiting for %v", want)
			}
			for id, h := range want {
				if strings.Contains(l, " agent="+id.String()+" ") {
					if !strings.HasSuffix(l, " "+h) {
						t.Errorf("kin events --follow on c: %q, want it to end with %q", l, h)
					}
					delete(want, id)
				}
			}
		case <-deadline:
			t.Fatalf("kin events --follow on c: no agent.started of %v within 30 s", want)
		}
	}
	if got := c.Exec(t, "events", "--agent", kid.ID.String(), "--type", kin.EventAgentRegistered); !strings.HasSuffix(strings.TrimSpace(got), " host=b") {
		t.Errorf("kin events --agent %d on c: %q, want host=b", kid.ID, got)
	}

	// c's /metrics: every host's agents, every host up.
	m := scrapeMetrics(t, c)
	for host, n := range map[string]string{"a": "1", "b": "1", "c": "0"} {
		if v, ok := metricOf(m, "kin_host_agents", "host", host); !ok || v != n {
			t.Errorf("c's kin_host_agents{host=%q} = %q (%v), want %s", host, v, ok, n)
		}
		if v, ok := metricOf(m, "kin_host_up", "host", host); !ok || v != "1" {
			t.Errorf("c's kin_host_up{host=%q} = %q (%v), want 1", host, v, ok)
		}
	}
	// b down: c's /metrics says so once its lease expired.
	b.Kill9(t)
	kintest.WaitFor(t, 30*time.Second, "kin_host_up{host=\"b\"} 0 on c", func() bool {
		v, ok := metricOf(scrapeMetrics(t, c), "kin_host_up", "host", "b")
		return ok && v == "0"
	})
}

// TestHandoffWhileParentHostDown: the parent's host (a) is down when the
// child on b ends; b checks and keeps the result, and a, once restarted,
// fetches and installs it.
func TestHandoffWhileParentHostDown(t *testing.T) {
	f := fleettest.Start(t, fenceArgs())
	a, b := f.Host(t, "a"), f.Host(t, "b")
	ctx := context.Background()
	dir := kintest.SharedDir(t)
	if err := os.WriteFile(filepath.Join(dir, "result.md"), []byte("Summary:\nmade while a was down\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	coder := spawnOn(t, a, "coder", 0, time.Second, "sleep", "3600")
	kid := spawnOn(t, b, "kid", coder.ID, time.Second, "sh", "-c",
		`while [ ! -e "$0/go-on" ]; do sleep 0.05; done; cp "$0/result.md" "$KIN_OUTPUT/"`, dir)
	var uidStart int
	if _, err := fmt.Sscanf(a.Info().AgentUIDRange, "%d:", &uidStart); err != nil {
		t.Fatal(err)
	}
	childDir := filepath.Join(a.Home, "ctx", "home", strconv.Itoa(uidStart+int(coder.ID)), "agent", "coder", "session", coder.Session, "context", "child", "kid")
	kintest.WaitFor(t, 30*time.Second, "kid's folder on a", func() bool {
		_, err := os.Stat(filepath.Join(childDir, "status"))
		return err == nil
	})

	a.Kill9(t)
	if err := os.WriteFile(filepath.Join(dir, "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	kintest.WaitFor(t, 30*time.Second, "kid's result recorded by b", func() bool {
		k := agentOn(b, kid.ID)
		return k != nil && k.Result == kin.ResultCompleted
	})
	if st := readFileT(t, filepath.Join(childDir, "status")); st != "running\n" {
		t.Fatalf("a's folder for kid says %q while a is down", st)
	}
	a.Restart(t)
	res, err := a.Client.Wait(ctx, kin.WaitRequest{ID: kid.ID, Timeout: kin.Duration(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kin.ResultCompleted || res.Result != "Summary:\nmade while a was down\n" || res.Dir != childDir {
		t.Errorf("a, restarted: kid's result = %+v", res)
	}
	if st := readFileT(t, filepath.Join(childDir, "status")); st != "completed\n" {
		t.Errorf("a's folder for kid says %q", st)
	}
}
