package hierarchy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// buildKin builds kin into a directory every uid may read: agents run as
// their own uids when the test runs as root, and kin publishes itself to
// its agents only when its binary is named kin. $KIN_EXAMPLE_BIN names a
// kin binary to use instead.
func buildKin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("KIN_EXAMPLE_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(kintest.SharedDir(t), "kin")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kin-agents/kin/cmd/kin").CombinedOutput(); err != nil {
		t.Fatalf("go build kin: %v\n%s", err, out)
	}
	return bin
}

// serve starts `kin serve --json` on home and returns its socket; the
// daemon is stopped (SIGTERM, then SIGKILL after 30 s) when the test ends.
func serve(t *testing.T, bin, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--home", home, "--http", "off", "--json"}, args...)...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	first := make(chan string, 1)
	go func() {
		// kin serve --json prints one indented object, then nothing more.
		r := bufio.NewReader(stdout)
		var obj strings.Builder
		for {
			l, err := r.ReadString('\n')
			obj.WriteString(l)
			if err != nil || strings.HasPrefix(l, "}") {
				break
			}
		}
		first <- obj.String()
		io.Copy(io.Discard, r)
	}()
	select {
	case s := <-first:
		var info struct {
			Socket string `json:"socket"`
		}
		if err := json.Unmarshal([]byte(s), &info); err != nil || info.Socket == "" {
			t.Fatalf("kin serve --json said %q (%v); stderr: %s", s, err, stderr.String())
		}
		return info.Socket
	case <-done:
		t.Fatalf("kin serve exited; stderr: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("kin serve printed nothing in 60 s; stderr: %s", stderr.String())
	}
	return ""
}

type lockedWriter struct {
	mu chan struct{}
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.mu == nil {
		l.mu = make(chan struct{}, 1)
	}
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.w.Write(p)
}

// cleanEnv is the test's environment without what would make kin act as
// an agent or talk to another daemon.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "KIN_SOCKET", "KIN_ADDR", "KIN_HOME", "KIN_PROFILE", "KIN_TOKEN":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runScript runs run.sh with args and kin bin, within a deadline.
func runScript(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./run.sh", args...)
	cmd.Env = append(cleanEnv(), "KIN="+bin)
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHierarchyEndToEnd runs seed 002's chain with run.sh on a running
// kin serve --profile hierarchy: GO → PO-MVP1 → Specialist-backend → three
// Workers, real processes using only the kin CLI.
func TestHierarchyEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	bin := buildKin(t)
	home := kintest.TempHome(t)
	sock := serve(t, bin, home, "--profile", "hierarchy")
	c, err := client.New(client.Config{Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	out, err := runScript(t, bin, "--home", home)
	if err != nil {
		t.Errorf("run.sh --home: %v\n%s", err, out)
	}
	agents, err := c.Agents(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	logs := func(id kin.AgentID) string {
		var b strings.Builder
		c.Logs(ctx, kin.LogsRequest{ID: id}, func(p []byte) error { b.Write(p); return nil })
		return b.String()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("run.sh said:\n%s", out)
			for _, a := range agents {
				t.Logf("agent %d %s: %s exit %v result %s; log:\n%s", a.ID, a.Name, a.State, a.Exit, a.Result, logs(a.ID))
			}
		}
	})
	result := func(a *kin.Agent) *kin.AgentResult {
		t.Helper()
		r, err := c.Result(ctx, a.ID)
		if err != nil {
			t.Fatalf("result of %s: %v", a.Name, err)
		}
		return r
	}

	// The chain: GO (gen 0) → PO-MVP1 (1) → Specialist-backend (2) → Workers
	// (3), Worker-2 twice: the crashed one and its replacement.
	want := []struct {
		name, role, parent string
		gen                int
	}{
		{"GO", "GO", "", 0},
		{"PO-MVP1", "PO", "GO", 1},
		{"Specialist-backend", "Specialist", "PO-MVP1", 2},
		{"Worker-1", "Worker", "Specialist-backend", 3},
		{"Worker-2", "Worker", "Specialist-backend", 3},
		{"Worker-3", "Worker", "Specialist-backend", 3},
		{"Worker-2", "Worker", "Specialist-backend", 3},
	}
	if len(agents) != len(want) {
		t.Fatalf("%d agents, want %d", len(agents), len(want))
	}
	ids := map[string]kin.AgentID{}
	for i, w := range want { // a fresh home: ids in spawn order
		a := agents[i]
		if a.Name != w.name || a.Role != w.role || a.Generation != w.gen || a.Parent != ids[w.parent] || a.Responsible != "Shai" {
			t.Errorf("agent %d: %s role %q gen %d parent %d responsible %q; want %s role %q gen %d parent %s (%d) responsible Shai",
				a.ID, a.Name, a.Role, a.Generation, a.Parent, a.Responsible, w.name, w.role, w.gen, w.parent, ids[w.parent])
		}
		if _, seen := ids[w.name]; !seen {
			ids[w.name] = a.ID
		}
	}
	spec, w1, w2, w3, w2r := agents[2], agents[3], agents[4], agents[5], agents[6]
	for _, a := range []*kin.Agent{agents[0], agents[1], spec, w1, w3, w2r} {
		if a.Exit == nil || a.Exit.Code != 0 || a.EndReason != "exited" {
			t.Errorf("%s (agent %d): exit %v, reason %q; want exit 0", a.Name, a.ID, a.Exit, a.EndReason)
		}
		if r := result(a); r.Status != kin.ResultCompleted {
			t.Errorf("%s (agent %d): result %s %q; want completed", a.Name, a.ID, r.Status, r.Violations)
		}
	}

	type rejected struct {
		Parent     kin.AgentID   `json:"parent"`
		Name       string        `json:"name"`
		Generation int           `json:"generation"`
		Code       kin.ErrorCode `json:"code"`
		Message    string        `json:"message"`
	}
	es, err := c.Events(ctx, kin.EventFilter{Types: []string{kin.EventSpawnRejected}})
	if err != nil {
		t.Fatal(err)
	}
	var refusals []rejected
	for _, e := range es {
		var r rejected
		if err := json.Unmarshal(e.Data, &r); err != nil {
			t.Fatal(err)
		}
		refusals = append(refusals, r)
	}
	if len(refusals) != 2 {
		t.Fatalf("spawn.rejected events = %+v; want two", refusals)
	}

	// (a) A Worker (generation 3, L4) never spawns: its spawn would be
	// generation 4, past the profile's max_generation_depth 3.
	if r := refusals[0]; r.Parent != w1.ID || r.Name != "Helper" || r.Generation != 4 || r.Code != kin.ECodeSpawnDepth {
		t.Errorf("first refusal = %+v; want Worker-1's (agent %d) spawn of Helper at generation 4 refused with %s", r, w1.ID, kin.ECodeSpawnDepth)
	}
	if r := result(w1).Result; !strings.Contains(r, "(spawn_depth_exceeded)") {
		t.Errorf("Worker-1's result lacks its refusal:\n%s", r)
	}

	// (b) A fourth concurrent child: the Specialist had three live Workers.
	if r := refusals[1]; r.Parent != spec.ID || r.Name != "Worker-4" || r.Code != kin.ECodeMaxChildren || !strings.Contains(r.Message, "already has 3 live children") {
		t.Errorf("second refusal = %+v; want Specialist-backend's (agent %d) fourth Worker refused with %s", r, spec.ID, kin.ECodeMaxChildren)
	}
	if r := result(spec).Result; !strings.Contains(r, "Worker-4: kin: agent 3 already has 3 live children; profile hierarchy allows at most 3 (max_children_exceeded)") {
		t.Errorf("Specialist-backend's result lacks its refusal:\n%s", r)
	}

	// (c) Worker-2 crashed after page 3; kin replaced it (restart
	// on-failure), handing the replacement its last cursor.
	if w2.Exit == nil || w2.Exit.Code != 1 || w2.EndReason != "crashed" || w2.Cursor != "page=3" || w2.Restart != kin.RestartOnFailure {
		t.Errorf("the first Worker-2: exit %v reason %q cursor %q restart %q; want a crash (exit 1) at cursor page=3 under on-failure",
			w2.Exit, w2.EndReason, w2.Cursor, w2.Restart)
	}
	if r := result(w2); r.Status != kin.ResultFailed {
		t.Errorf("the first Worker-2's result is %s, want failed", r.Status)
	}
	es, err = c.Events(ctx, kin.EventFilter{Types: []string{kin.EventAgentReplaced}})
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Agent       kin.AgentID `json:"agent"`
		Replacement kin.AgentID `json:"replacement"`
		Cursor      string      `json:"cursor"`
		Reason      string      `json:"reason"`
	}
	if len(es) != 1 || json.Unmarshal(es[0].Data, &rep) != nil || rep.Agent != w2.ID || rep.Replacement != w2r.ID || rep.Cursor != "page=3" || rep.Reason != "crashed" {
		t.Errorf("agent.replaced events = %d, the first %+v; want one: agent %d replaced by %d from cursor page=3 after a crash", len(es), rep, w2.ID, w2r.ID)
	}
	if w2r.Replaces != w2.ID || w2r.Cursor != "page=6" {
		t.Errorf("the replacement: replaces %d, cursor %q; want %d and page=6", w2r.Replaces, w2r.Cursor, w2.ID)
	}
	if l := logs(w2r.ID); !strings.Contains(l, "KIN_RESUME_CURSOR=page=3") || strings.Contains(l, "page 3\n") {
		t.Errorf("the replacement's log does not show it resuming after page 3:\n%s", l)
	}
	if r := result(w2r).Result; !strings.Contains(r, "Worker-2 processed pages 4 5 6, resuming after cursor page=3.") {
		t.Errorf("the replacement's result:\n%s", r)
	}
	if r := result(w3).Result; !strings.Contains(r, "Worker-3 processed pages 1 2 3 4 5 6.") {
		t.Errorf("Worker-3's result:\n%s", r)
	}

	// All of it reached GO's result, which run.sh printed with kin tree.
	goResult := result(agents[0]).Result
	for _, s := range []string{"(spawn_depth_exceeded)", "(max_children_exceeded)", "pages 4 5 6, resuming after cursor page=3"} {
		if !strings.Contains(goResult, s) {
			t.Errorf("GO's result lacks %q:\n%s", s, goResult)
		}
	}
	for _, s := range []string{"agent 1 (GO): completed", "code=spawn_depth_exceeded", "code=max_children_exceeded", `agent.replaced        agent=5 cursor="page=3"`,
		"#1 GO  role=GO gen=0 ", "    └── #3 Specialist-backend  role=Specialist gen=2 ", "#5 Worker-2  role=Worker gen=3 status=terminated state=exited exit=1 reason=crashed"} {
		if !strings.Contains(out, s) {
			t.Errorf("run.sh's output lacks %q", s)
		}
	}
}

// TestRunScript runs the example the way its README says, with nothing
// running: run.sh starts its own kin serve --profile hierarchy on a
// temporary home, runs the chain, and stops it.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	out, err := runScript(t, buildKin(t))
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	for _, s := range []string{"agent 1 (GO): completed", "(spawn_depth_exceeded)", "(max_children_exceeded)", "resuming after cursor page=3"} {
		if !strings.Contains(out, s) {
			t.Errorf("run.sh's output lacks %q:\n%s", s, out)
		}
	}
}
