package main

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

// The agents of the end-to-end test: shell scripts that use only the kin
// CLI, as any agent could. The parent waits for the operator's go, spawns
// the sub-agent, exchanges the sub-agent's resource token for an auth token
// and hands it back; after the operator removed its grant it tries again and
// must be refused. The sub-agent calls the resource, passes its resource
// token and its agent token to the parent over kin's messaging, calls again
// with the auth token, tries to spawn a child of its own (refused under the
// aauth profile), and finally finds its old auth token revoked.
const parentScript = `set -u
exec 2>&1
url=$1; dir=$(dirname "$0")
seqof() { s=${1%% *}; echo "${s#\#}"; }
go=$(kin inbox --follow --max 1); seq=$(seqof "$go")
kin spawn --name search1 -- sh "$dir/child.sh" "$url" >/dev/null || { echo "spawn failed"; exit 1; }
msg=$(kin inbox --follow --max 1 --since "$seq"); seq=$(seqof "$msg")
child=$(echo "$msg" | sed 's/^#[0-9]* from \([0-9]*\) .*/\1/')
set -- $(echo "$msg" | sed 's/^#[0-9]* from [0-9]* to [0-9]* \[[^]]*\] //')
at=$(kin aauth authorize --resource-token "$1" --subagent-token "$2") || { echo "first authorize failed"; exit 1; }
echo "authorized sub-agent $child"
kin send "$child" "$at"
msgs=$(kin inbox --follow --max 2 --since "$seq")
set -- $(echo "$msgs" | grep " from $child " | sed 's/^#[0-9]* from [0-9]* to [0-9]* \[[^]]*\] //')
if out=$(kin aauth authorize --resource-token "$1" --subagent-token "$2" 2>&1); then
  echo "second authorize succeeded"
else
  echo "second authorize refused: $out"
fi
kin send "$child" done
kin wait "$child" >/dev/null
`

const childScript = `set -u
exec 2>&1
echo "started"
url=$1
seqof() { s=${1%% *}; echo "${s#\#}"; }
rt=$(kin aauth fetch "$url"); st=$?
[ "$st" -eq 3 ] || { echo "first call: exit $st: $rt"; exit 1; }
echo "got a resource token"
kin send "$KIN_PARENT_ID" "$rt $(kin token)"
echo "sent it to the parent"
msg=$(kin inbox --follow --max 1); seq=$(seqof "$msg")
at=${msg##* }
docs=$(kin aauth fetch "$url" --auth-token "$at") || { echo "call with the auth token failed"; exit 1; }
echo "documents: $docs"
echo "$docs" > "$KIN_OUTPUT/result.md"
if out=$(kin spawn --name grandchild -- true 2>&1); then echo "grandchild spawned"; else echo "grandchild refused: $out"; fi
rt2=$(kin aauth fetch "$url")
kin send "$KIN_PARENT_ID" "$rt2 $(kin token)"
echo "round two sent"
kin inbox --follow --max 1 --since "$seq" >/dev/null
if out=$(kin aauth fetch "$url" --auth-token "$at" 2>&1); then echo "old token accepted"; else echo "old token refused: $out"; fi
`

// proc is a process the test started and stops.
type proc struct {
	cmd  *exec.Cmd
	line string // its first stdout line (kin serve --json: its first object)
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, err := r.ReadString('\n')
		if l == "{\n" { // kin serve --json: an indented object
			for err == nil && !strings.HasPrefix(l, "}") {
				var more string
				more, err = r.ReadString('\n')
				l += more
				if strings.HasPrefix(more, "}") {
					break
				}
			}
		}
		if err == nil {
			lines <- strings.TrimSpace(l)
		}
		close(lines)
		io.Copy(io.Discard, r)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("%s exited without a line; stderr: %s", bin, stderr.String())
		}
		return &proc{cmd: cmd, line: l}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s printed nothing in 60 s; stderr: %s", bin, stderr.String())
	}
	return nil
}

// TestSubAgentAuthorizationEndToEnd runs seed 004's flow with real
// processes: kin serve (aauth profile), this example resource, and two
// agents that use only the kin CLI.
func TestSubAgentAuthorizationEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	bins := kintest.SharedDir(t)
	for name, pkg := range map[string]string{"kin": "github.com/kin-agents/kin/cmd/kin", "aauth-resource": "."} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bins, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for name, body := range map[string]string{"parent.sh": parentScript, "child.sh": childScript} {
		if err := os.WriteFile(filepath.Join(bins, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := kintest.TempHome(t)
	kinBin := filepath.Join(bins, "kin")
	serve := start(t, kinBin, "serve", "--home", home, "--http", "127.0.0.1:0", "--profile", "aauth", "--json")
	var info struct {
		HTTP   string `json:"http"`
		Socket string `json:"socket"`
	}
	if err := json.Unmarshal([]byte(serve.line), &info); err != nil || info.HTTP == "" {
		t.Fatalf("kin serve --json said %q (%v)", serve.line, err)
	}
	ps := "http://" + info.HTTP
	res := start(t, filepath.Join(bins, "aauth-resource"), "--person-server", ps)
	base, ok := strings.CutPrefix(res.line, "listening on ")
	if !ok {
		t.Fatalf("resource said %q", res.line)
	}
	api := base + "/api/documents"

	kinCLI := func(args ...string) (string, error) {
		cmd := exec.Command(kinBin, append([]string{"--home", home}, args...)...)
		cmd.Env = append(os.Environ(), "KIN_ADDR=", "KIN_SOCKET=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(client.Config{Socket: info.Socket})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() {
		// Leave nothing running even when the test fails half-way.
		for _, a := range mustAgents(t, c) {
			if a.Parent == 0 && a.Running() {
				c.Stop(context.Background(), kin.StopRequest{ID: a.ID})
			}
		}
	})

	parent, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "planner", Responsible: "Dr. Schmidt"},
		Command: []string{"sh", filepath.Join(bins, "parent.sh"), api}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kinCLI("grant", parent.ID.String(), "--resource", base, "--scope", "data.read"); err != nil {
		t.Fatalf("kin grant: %v\n%s", err, out)
	}
	if _, err := c.Send(ctx, kin.SendRequest{To: parent.ID.String(), Text: "go"}); err != nil {
		t.Fatal(err)
	}

	logs := func(id kin.AgentID) string {
		var b strings.Builder
		c.Logs(context.Background(), kin.LogsRequest{ID: id}, func(p []byte) error { b.Write(p); return nil })
		return b.String()
	}
	var child *kin.Agent
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("parent's log:\n%s", logs(parent.ID))
			if child != nil {
				t.Logf("sub-agent's log:\n%s", logs(child.ID))
			}
			es, _ := c.Events(context.Background(), kin.EventFilter{})
			for _, e := range es {
				t.Logf("event %s agent %d parent %d %s", e.Type, e.Agent, e.Parent, e.Data)
			}
		}
	})
	kintest.WaitFor(t, 40*time.Second, "the sub-agent to send its second resource token", func() bool {
		if child == nil {
			kids, _ := c.Children(ctx, parent.ID)
			if len(kids) == 0 {
				return false
			}
			child = kids[0]
		}
		return strings.Contains(logs(child.ID), "round two sent") || hasEnded(ctx, c, child.ID)
	})
	childLog := logs(child.ID)
	for _, want := range []string{"documents: ", "q3-report.pdf", "grandchild refused: ", string(kin.ECodeSpawnDepth), "round two sent"} {
		if !strings.Contains(childLog, want) {
			t.Fatalf("the sub-agent's log lacks %q:\n%s\nparent's log:\n%s", want, childLog, logs(parent.ID))
		}
	}

	// The sub-agent's token names its parent; the auth token was issued to
	// the parent for the sub-agent's key and recorded as such.
	issued := eventsOf(t, ctx, c, kin.EventTokenIssued)
	if len(issued) != 1 || issued[0].Agent != child.ID || issued[0].Parent != parent.ID {
		t.Fatalf("issued events = %+v; want one naming sub-agent %d and parent %d", issued, child.ID, parent.ID)
	}

	out, err := kinCLI("ungrant", parent.ID.String(), "--resource", base)
	if err != nil || !strings.Contains(out, "1 auth tokens revoked") {
		t.Fatalf("kin ungrant: %v\n%s", err, out)
	}
	if _, err := c.Send(ctx, kin.SendRequest{To: parent.ID.String(), Text: "retry"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, kin.WaitRequest{ID: child.ID, Timeout: kin.Duration(time.Minute)}); err != nil {
		t.Fatalf("wait for the sub-agent: %v", err)
	}
	parentLog, childLog := logs(parent.ID), logs(child.ID)
	if !strings.Contains(parentLog, "second authorize refused: ") || !strings.Contains(parentLog, "access_denied") || !strings.Contains(parentLog, "no grant") {
		t.Fatalf("the parent's second authorization was not refused for want of a grant:\n%s", parentLog)
	}
	if !strings.Contains(childLog, "old token refused: ") || !strings.Contains(childLog, "revoked_jwt") {
		t.Fatalf("the revoked auth token was not refused by the resource:\n%s", childLog)
	}
	refused := eventsOf(t, ctx, c, kin.EventTokenRefused)
	if len(refused) == 0 || refused[len(refused)-1].Agent != child.ID || refused[len(refused)-1].Parent != parent.ID {
		t.Fatalf("refused events = %+v; want the last naming sub-agent %d and parent %d", refused, child.ID, parent.ID)
	}
	revoked := eventsOf(t, ctx, c, kin.EventTokenRevoked)
	if len(revoked) == 0 || revoked[0].Agent != child.ID || revoked[0].Parent != parent.ID {
		t.Fatalf("revoked events = %+v", revoked)
	}
	toks, err := c.AuthTokens(ctx, kin.AuthTokenFilter{})
	if err != nil || len(toks) != 1 || toks[0].State != kin.TokenRevoked || toks[0].RevokedReason != "grant removed" {
		t.Fatalf("auth tokens = %+v, %v; want the one token listed revoked for the removed grant", toks, err)
	}
}

func hasEnded(ctx context.Context, c *client.Client, id kin.AgentID) bool {
	a, err := c.Agent(ctx, id)
	return err != nil || !a.EndedAt.IsZero()
}

func mustAgents(t *testing.T, c *client.Client) []*kin.Agent {
	as, err := c.Agents(context.Background(), kin.AgentFilter{})
	if err != nil {
		t.Log(err)
	}
	return as
}

func eventsOf(t *testing.T, ctx context.Context, c *client.Client, typ string) []kin.Event {
	t.Helper()
	es, err := c.Events(ctx, kin.EventFilter{Types: []string{typ}})
	if err != nil {
		t.Fatal(err)
	}
	return es
}
