package daemon_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// seedDir holds seed 001's example files (the handoff package's test data).
const seedDir = "../handoff/testdata/seed001"

// seedWork lays out the example where every agent uid may read it:
// handoff.md, contract.json, result.md, patch.diff and
// docs/spec/agent-tool-security.md.
func seedWork(t *testing.T) string {
	t.Helper()
	work := kintest.SharedDir(t)
	for name, to := range map[string]string{
		"handoff.md": "handoff.md", "contract.json": "contract.json", "result.md": "result.md",
		"patch.diff": "patch.diff", "agent-tool-security.md": "docs/spec/agent-tool-security.md",
	} {
		b, err := os.ReadFile(filepath.Join(seedDir, name))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(work, to)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// family runs seed 001's example: the operator spawns "coder", which
// spawns "rev-123" running childMode with the seed's handoff. With wait,
// coder waits for its child and reports its status.
type family struct {
	d            *kintest.Daemon
	work         string
	coder        *kin.Agent
	child        kin.AgentID
	out, kidOut  string
	ctx          string
	coderSession string // its session directory
}

func runFamily(t *testing.T, childMode string, wait bool) *family {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agents run as their own uids only under a root daemon; the isolation tested here needs it")
	}
	f := &family{d: kintest.StartDaemon(t), work: seedWork(t), out: outPath(t), kidOut: outPath(t)}
	f.ctx = filepath.Join(f.d.Home, "ctx")
	w := "0"
	if wait {
		w = "1"
	}
	f.coder = spawnAgent(t, f.d.Client, "coder", 0, "coder", withEnv("KINTEST_CHILD="+childMode, "KINTEST_WORK="+f.work,
		"KINTEST_OUT="+f.out, "KINTEST_CHILD_OUT="+f.kidOut, "KINTEST_WAIT="+w))
	if f.coder.Session != ctxfs.DefaultSession {
		t.Fatalf("coder's session is %q, want %q", f.coder.Session, ctxfs.DefaultSession)
	}
	f.coderSession = filepath.Join(f.ctx, "home", uidOf(f.d, f.coder.ID), "agent", "coder", "session", "default")
	said := "spawned " // coder says "spawned <id>", or with wait "child <id> <status>"
	if wait {
		said = "child "
	}
	line := lastLine(waitOut(t, f.out, said))
	id, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
	if f.child = kin.AgentID(id); f.child == 0 {
		t.Fatalf("coder said %q", line)
	}
	return f
}

func uidOf(d *kintest.Daemon, id kin.AgentID) string {
	if r := d.AgentUIDRange(); r != nil {
		return strconv.Itoa(int(r.Start) + int(id))
	}
	return strconv.Itoa(os.Geteuid())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (f *family) childDir() string {
	return filepath.Join(f.coderSession, "context", "child", "rev-123")
}

func (f *family) childSession() string {
	return filepath.Join(f.ctx, "home", uidOf(f.d, f.child), "agent", "rev-123", "session", "default")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sha(t *testing.T, path string) string {
	h := sha256.Sum256([]byte(readFile(t, path)))
	return "sha256:" + hex.EncodeToString(h[:])
}

func readRefs(t *testing.T, path string) []kin.Ref {
	t.Helper()
	var refs []kin.Ref
	sc := bufio.NewScanner(strings.NewReader(readFile(t, path)))
	for sc.Scan() {
		var r kin.Ref
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		refs = append(refs, r)
	}
	return refs
}

// TestSeed001HandoffEndToEnd is seed 001's whole example with real
// processes: coder spawns reviewer rev-123 with the seed's handoff.md (the
// mount ABI review), the spec as an input ref and an output contract; the
// child writes the seed's result.md, refs.jsonl and artifact/patch.diff to
// its output; kin checks them and copies them into coder's
// context/child/rev-123/ with verified hashes and status completed.
func TestSeed001HandoffEndToEnd(t *testing.T) {
	f := runFamily(t, "reviewer", true)
	if got := lastLine(readFile(t, f.out)); got != "child "+f.child.String()+" completed" {
		t.Fatalf("coder saw %q", got)
	}
	spec := filepath.Join(f.work, "docs/spec/agent-tool-security.md")

	// The parent's context/child/rev-123/: seed 001's "Child Session" list.
	dir := f.childDir()
	for name, want := range map[string]string{
		"agent":      f.child.String() + "\n",
		"session":    "default\n",
		"status":     "completed\n",
		"handoff.md": readFile(t, filepath.Join(seedDir, "handoff.md")),
		"result.md":  readFile(t, filepath.Join(seedDir, "result.md")),
	} {
		if got := readFile(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got, want := readFile(t, filepath.Join(dir, "artifact/patch.diff")), readFile(t, filepath.Join(seedDir, "patch.diff")); got != want {
		t.Errorf("artifact/patch.diff = %q, want %q", got, want)
	}
	refs := readRefs(t, filepath.Join(dir, "refs.jsonl"))
	if len(refs) != 2 || refs[0].Path != spec || refs[0].Hash != sha(t, spec) || refs[0].Summary != "mount spec reviewed" ||
		refs[1].Path != "artifact/patch.diff" || refs[1].Kind != "patch" || refs[1].Hash != sha(t, filepath.Join(dir, "artifact/patch.diff")) {
		t.Errorf("refs.jsonl = %+v", refs)
	}
	for _, name := range []string{"messages.jsonl", "events.jsonl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("the child's %s is in the parent's context", name)
		}
	}
	// The child's folder and every file in it belong to the parent.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)) != uidOf(f.d, f.coder.ID) {
			t.Errorf("%s is not the parent's", p)
		}
		return nil
	})

	// The API says the same.
	res, err := f.d.Client.Result(ctx, f.child)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kin.ResultCompleted || len(res.Violations) != 0 || res.Dir != dir || len(res.Refs) != 2 ||
		res.Result != readFile(t, filepath.Join(seedDir, "result.md")) {
		t.Errorf("result = %+v", res)
	}
	evs := events(t, f.d.Client, kin.EventFilter{Agent: f.child, Types: []string{kin.EventAgentResult}})
	if len(evs) != 1 || field[string](t, evs[0], "status") != "completed" || evs[0].Parent != f.coder.ID {
		t.Errorf("agent.result events = %v", evs)
	}

	// The child's own session: the seed's list, its messages, its events,
	// its state; the handoff in its context/.
	s := f.childSession()
	for _, name := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "cwd", "created_at", "updated_at", "meta.json", "context/handoff.md", "context/refs.jsonl", "context/contract.json", "context/policy.json", "context/mounts.json"} {
		if _, err := os.Stat(filepath.Join(s, name)); err != nil {
			t.Errorf("child session: %v", err)
		}
	}
	if got := readFile(t, filepath.Join(s, "state")); got != "terminated\n" {
		t.Errorf("child state = %q", got)
	}
	if got := readFile(t, filepath.Join(s, "messages.jsonl")); !strings.Contains(got, "review done") {
		t.Errorf("child messages = %q", got)
	}
	if got := readFile(t, filepath.Join(s, "events.jsonl")); !strings.Contains(got, `"type":"agent.started"`) || !strings.Contains(got, `"type":"agent.result"`) {
		t.Errorf("child events.jsonl = %s", got)
	}

	// The control files answer what the API answers.
	ctl := filepath.Join(f.ctx, "agent", "rev-123.d")
	a, _ := f.d.Client.Agent(ctx, f.child)
	for name, want := range map[string]string{
		"parent": "agent:coder session:default run:r" + f.coder.ID.String() + "\n",
		"life":   "owned\n",
		"label":  "reviewer\n",
		"status": string(a.Status) + "\n",
		"uid":    uidOf(f.d, f.child) + "\n",
		"pid":    "",
		"cwd":    s + "\n",
	} {
		if got := readFile(t, filepath.Join(ctl, name)); got != want {
			t.Errorf("control file %s = %q, want %q", name, got, want)
		}
	}
	// mount and policy show the child's effective policy (its mount subset).
	if got := readFile(t, filepath.Join(ctl, "mount")); !strings.Contains(got, f.work+" ro\n") {
		t.Errorf("control file mount = %q, want a line %q", got, f.work+" ro")
	}
	if got := readFile(t, filepath.Join(ctl, "policy")); !strings.Contains(got, `"mounts":{`) || !strings.Contains(got, strconv.Quote(f.work)+`:"ro"`) {
		t.Errorf("control file policy = %q, want the effective mounts", got)
	}
	var meta kin.Agent
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(ctl, "meta.json"))), &meta); err != nil || meta.ID != a.ID || meta.Result != kin.ResultCompleted || meta.State != a.State {
		t.Errorf("meta.json = %+v, %v", meta, err)
	}
	if got := readFile(t, filepath.Join(f.ctx, "agent", "rev-123")); got != f.child.String()+"\n" {
		t.Errorf("agent/rev-123 = %q", got)
	}

	// The context pack: the result and the refs, never the messages.
	pack, err := f.d.Client.ContextPack(ctx, f.coder.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pack.Text, "The mount ABI is mostly clear") || !strings.Contains(pack.Text, "mount spec reviewed") ||
		strings.Contains(pack.Text, "review done") || !strings.Contains(pack.Text, "rev-123") {
		t.Errorf("context pack:\n%s", pack.Text)
	}
}

// TestContractViolationIsKeptAndMarked: a result without the Findings the
// contract requires is copied all the same, marked contract_violated, and
// the violation named.
func TestContractViolationIsKeptAndMarked(t *testing.T) {
	f := runFamily(t, "reviewer-short", true)
	if got := lastLine(readFile(t, f.out)); got != "child "+f.child.String()+" contract_violated" {
		t.Fatalf("coder saw %q", got)
	}
	if got := readFile(t, filepath.Join(f.childDir(), "status")); got != "contract_violated\n" {
		t.Errorf("status = %q", got)
	}
	if got := readFile(t, filepath.Join(f.childDir(), "result.md")); !strings.Contains(got, "Looks fine.") {
		t.Errorf("the result was not kept: %q", got)
	}
	res, err := f.d.Client.Result(ctx, f.child)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kin.ResultContractViolated || !strings.Contains(strings.Join(res.Violations, "\n"), "Findings") {
		t.Errorf("result = %+v", res)
	}
}

// TestLyingRefHashIsCaught: the child claims a hash its patch does not
// have; kin computes the true one, marks the result and keeps only the
// hash it computed in the parent's refs.jsonl.
func TestLyingRefHashIsCaught(t *testing.T) {
	f := runFamily(t, "reviewer-lie", true)
	if got := lastLine(readFile(t, f.out)); got != "child "+f.child.String()+" contract_violated" {
		t.Fatalf("coder saw %q", got)
	}
	res, err := f.d.Client.Result(ctx, f.child)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Violations, "\n"), "artifact/patch.diff") {
		t.Errorf("violations = %q", res.Violations)
	}
	refs := readRefs(t, filepath.Join(f.childDir(), "refs.jsonl"))
	if len(refs) != 2 || refs[1].Hash != sha(t, filepath.Join(f.childDir(), "artifact/patch.diff")) {
		t.Errorf("the parent's refs.jsonl carries a hash kin did not compute: %+v", refs)
	}
}

// TestChildCannotReadParentMessages: seed 001, "child cannot read parent
// messages.jsonl by default". The child tries, as the uid it runs as, and
// is denied by the kernel; so is listing the parent's session.
func TestChildCannotReadParentMessages(t *testing.T) {
	f := runFamily(t, "peek-parent", true)
	got := readFile(t, f.kidOut)
	if !strings.Contains(got, "peek denied") || !strings.Contains(got, "list denied") {
		t.Fatalf("the child's attempt: %q", got)
	}
	// Its reading was refused, not impossible: the file is there.
	if m := readFile(t, filepath.Join(f.coderSession, "messages.jsonl")); !strings.Contains(m, "plan:") {
		t.Fatalf("parent messages = %q", m)
	}
}

// TestParentDeathCancelsRuntimeNotHistory: seed 001, "Parent Death": the
// coder is killed while its child works; the child's process ends, its
// session says cancelled, and its messages and events stay readable, the
// events holding the seed's agent.child.cancel and agent.stop.
func TestParentDeathCancelsRuntimeNotHistory(t *testing.T) {
	f := runFamily(t, "chatty", false)
	waitOut(t, f.kidOut, "chatty")
	child, err := f.d.Client.Agent(ctx, f.child)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(f.coder.PID, syscall.SIGKILL); err != nil { // the parent dies
		t.Fatal(err)
	}
	res, err := f.d.Client.Wait(ctx, kin.WaitRequest{ID: f.child})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kin.ResultCancelled || res.Agent.State != kin.StateCancelled {
		t.Fatalf("wait = %s, state %s", res.Status, res.Agent.State)
	}
	if alive(child.PID) {
		t.Errorf("the child's process %d outlived its parent", child.PID)
	}
	s := f.childSession()
	if got := readFile(t, filepath.Join(s, "state")); got != "cancelled\n" {
		t.Errorf("child session state = %q", got)
	}
	if got := readFile(t, filepath.Join(s, "messages.jsonl")); !strings.Contains(got, "working on it") {
		t.Errorf("child messages = %q", got)
	}
	evs := readFile(t, filepath.Join(s, "events.jsonl"))
	for _, want := range []string{
		`"type":"agent.child.cancel","parent":` + f.coder.ID.String() + `,"child":` + f.child.String() + `,"reason":"parent_dead"`,
		`"type":"agent.stop","agent":` + f.child.String() + `,"status":"cancelled"`,
	} {
		if !strings.Contains(evs, want) {
			t.Errorf("child events.jsonl lacks %s:\n%s", want, evs)
		}
	}
	if got := readFile(t, filepath.Join(f.childDir(), "status")); got != "cancelled\n" {
		t.Errorf("the parent's status of its child = %q", got)
	}
	if !bytes.Contains([]byte(readFile(t, filepath.Join(f.ctx, "agent", "rev-123.d", "status"))), []byte("terminated")) {
		t.Errorf("control status not terminated")
	}
}

// TestOperatorHandoffToRoot: the operator hands a task to a root agent;
// with no parent session, kin checks the result where the agent wrote it,
// its own output/, and `kin wait` returns it.
func TestOperatorHandoffToRoot(t *testing.T) {
	d := kintest.StartDaemon(t)
	work := seedWork(t)
	spec := filepath.Join(work, "docs/spec/agent-tool-security.md")
	h := &kin.Handoff{Task: readFile(t, filepath.Join(work, "handoff.md")), Contract: []byte(readFile(t, filepath.Join(work, "contract.json"))),
		Refs: []kin.Ref{{Path: spec, Hash: sha(t, spec)}}}
	a := spawnAgent(t, d.Client, "rev-1", 0, "reviewer", withEnv("KINTEST_WORK="+work, "KINTEST_OUT="+outPath(t)),
		func(r *kin.SpawnRequest) { r.Handoff = h })
	if a.Result != kin.ResultRunning {
		t.Fatalf("spawned with result %q", a.Result)
	}
	res, err := d.Client.Wait(ctx, kin.WaitRequest{ID: a.ID, Timeout: kin.Duration(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != kin.ResultCompleted || !strings.HasSuffix(res.Dir, "/session/default/output") || !strings.Contains(res.Result, "Summary:") {
		t.Fatalf("result = %+v", res)
	}
}

// TestBadHandoffChangesNothing: a handoff that fails validation is refused
// with an error naming the problem, before any agent is registered.
func TestBadHandoffChangesNothing(t *testing.T) {
	d := kintest.StartDaemon(t)
	for _, c := range []struct {
		h    kin.Handoff
		want string
	}{
		{kin.Handoff{Task: " "}, "handoff.md is empty"},
		{kin.Handoff{Task: "t", Refs: []kin.Ref{{Path: "rel/path", Hash: "sha256:" + strings.Repeat("0", 64)}}}, "absolute"},
		{kin.Handoff{Task: "t", Refs: []kin.Ref{{Path: "/x"}}}, "no hash"},
		{kin.Handoff{Task: "t", Contract: []byte(`{"sections":[{"name":"S","max_bytes":0}]}`)}, "max_bytes"},
		{kin.Handoff{Task: "t", Contract: []byte(`{"bogus":1}`)}, "bogus"},
	} {
		h := c.h
		_, err := d.Client.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "x", Responsible: "r"},
			Command: []string{kintest.AgentBinary(t)}, Handoff: &h})
		if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("handoff %+v: %v, want invalid naming %q", c.h, err, c.want)
		}
	}
	if all, _ := d.Client.Agents(ctx, kin.AgentFilter{}); len(all) != 0 {
		t.Fatalf("a refused spawn registered %d agents", len(all))
	}
}
