package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/exampletest"
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

// TestSubAgentAuthorizationEndToEnd runs seed 004's flow with real
// processes: kin serve (aauth profile), this example resource, and two
// agents that use only the kin CLI.
func TestSubAgentAuthorizationEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kin and runs real agents")
	}
	d := exampletest.Serve(t, exampletest.Kin(t), "--http", "127.0.0.1:0", "--profile", "aauth")
	if d.HTTP == "" {
		t.Fatal("kin serve --json gave no HTTP address")
	}
	dir := kintest.SharedDir(t)
	for name, body := range map[string]string{"parent.sh": parentScript, "child.sh": childScript} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res := exampletest.Start(t, exampletest.Build(t, dir, "aauth-resource", "."), "--person-server", "http://"+d.HTTP)
	base, ok := strings.CutPrefix(res.Line, "listening on ")
	if !ok {
		t.Fatalf("resource said %q", res.Line)
	}
	api := base + "/api/documents"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := d.Client

	parent, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: "planner", Responsible: "Dr. Schmidt"},
		Command: []string{"sh", filepath.Join(dir, "parent.sh"), api}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := d.Kin("grant", parent.ID.String(), "--resource", base, "--scope", "data.read"); err != nil {
		t.Fatalf("kin grant: %v\n%s", err, out)
	}
	if _, err := c.Send(ctx, kin.SendRequest{To: parent.ID.String(), Text: "go"}); err != nil {
		t.Fatal(err)
	}

	var child *kin.Agent
	kintest.WaitFor(t, 40*time.Second, "the sub-agent to send its second resource token", func() bool {
		if child == nil {
			kids, _ := c.Children(ctx, parent.ID)
			if len(kids) == 0 {
				return false
			}
			child = kids[0]
		}
		if strings.Contains(d.Logs(child.ID), "round two sent") {
			return true
		}
		a, err := c.Agent(ctx, child.ID)
		return err != nil || !a.EndedAt.IsZero()
	})
	childLog := d.Logs(child.ID)
	for _, want := range []string{"documents: ", "q3-report.pdf", "grandchild refused: ", string(kin.ECodeSpawnDepth), "round two sent"} {
		if !strings.Contains(childLog, want) {
			t.Fatalf("the sub-agent's log lacks %q:\n%s\nparent's log:\n%s", want, childLog, d.Logs(parent.ID))
		}
	}

	// The sub-agent's token names its parent; the auth token was issued to
	// the parent for the sub-agent's key and recorded as such.
	issued := d.Events(t, kin.EventTokenIssued)
	if len(issued) != 1 || issued[0].Agent != child.ID || issued[0].Parent != parent.ID {
		t.Fatalf("issued events = %+v; want one naming sub-agent %d and parent %d", issued, child.ID, parent.ID)
	}

	out, err := d.Kin("ungrant", parent.ID.String(), "--resource", base)
	if err != nil || !strings.Contains(out, "1 auth tokens revoked") {
		t.Fatalf("kin ungrant: %v\n%s", err, out)
	}
	if _, err := c.Send(ctx, kin.SendRequest{To: parent.ID.String(), Text: "retry"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, kin.WaitRequest{ID: child.ID, Timeout: kin.Duration(time.Minute)}); err != nil {
		t.Fatalf("wait for the sub-agent: %v", err)
	}
	parentLog, childLog := d.Logs(parent.ID), d.Logs(child.ID)
	if !strings.Contains(parentLog, "second authorize refused: ") || !strings.Contains(parentLog, "access_denied") || !strings.Contains(parentLog, "no grant") {
		t.Fatalf("the parent's second authorization was not refused for want of a grant:\n%s", parentLog)
	}
	if !strings.Contains(childLog, "old token refused: ") || !strings.Contains(childLog, "revoked_jwt") {
		t.Fatalf("the revoked auth token was not refused by the resource:\n%s", childLog)
	}
	refused := d.Events(t, kin.EventTokenRefused)
	if len(refused) == 0 || refused[len(refused)-1].Agent != child.ID || refused[len(refused)-1].Parent != parent.ID {
		t.Fatalf("refused events = %+v; want the last naming sub-agent %d and parent %d", refused, child.ID, parent.ID)
	}
	revoked := d.Events(t, kin.EventTokenRevoked)
	if len(revoked) == 0 || revoked[0].Agent != child.ID || revoked[0].Parent != parent.ID {
		t.Fatalf("revoked events = %+v", revoked)
	}
	toks, err := c.AuthTokens(ctx, kin.AuthTokenFilter{})
	if err != nil || len(toks) != 1 || toks[0].State != kin.TokenRevoked || toks[0].RevokedReason != "grant removed" {
		t.Fatalf("auth tokens = %+v, %v; want the one token listed revoked for the removed grant", toks, err)
	}
}
