package cli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func TestWait(t *testing.T) {
	svc := &fakeService{results: map[kin.AgentID]*kin.AgentResult{
		8:  childResult(8, kin.ResultCompleted, "Summary: no traversal found.\n\nFindings:\n- none\n"),
		9:  childResult(9, kin.ResultContractViolated, "Summary: partial", "section \"Findings\": required, missing", "ref artifact/x.diff: hash differs\nclaimed sha256:00"),
		10: childResult(10, kin.ResultFailed, ""),
		11: childResult(11, kin.ResultCancelled, ""),
	}}
	for _, tc := range []struct {
		id   string
		code int
		out  string
	}{
		{"8", ExitOK, "agent 8 (rev-123): completed\n\nSummary: no traversal found.\n\nFindings:\n- none\n"},
		{"#9", ExitNotCompleted, "agent 9 (rev-123): contract_violated\n- section \"Findings\": required, missing\n- ref artifact/x.diff: hash differs\n  claimed sha256:00\n\nSummary: partial\n"},
		{"10", ExitNotCompleted, "agent 10 (rev-123): failed\n"},
		{"11", ExitNotCompleted, "agent 11 (rev-123): cancelled\n"},
	} {
		r := runFake(t, svc, "", "wait", tc.id)
		if r.code != tc.code || r.stdout != tc.out || r.stderr != "" {
			t.Errorf("kin wait %s: exit %d, stdout:\n%s\nstderr: %q\nwant exit %d, stdout:\n%s", tc.id, r.code, r.stdout, r.stderr, tc.code, tc.out)
		}
	}
	if want := []kin.WaitRequest{{ID: 8}, {ID: 9}, {ID: 10}, {ID: 11}}; !reflect.DeepEqual(svc.waits, want) {
		t.Errorf("waits %+v, want %+v", svc.waits, want)
	}

	// --json: the result as kin keeps it, and the same exit statuses.
	for id, code := range map[kin.AgentID]int{8: ExitOK, 9: ExitNotCompleted} {
		r := runFake(t, svc, "", "wait", id.String(), "--json", "--timeout", "90s")
		if r.code != code || r.stderr != "" {
			t.Fatalf("kin wait %d --json: exit %d, stderr %q", id, r.code, r.stderr)
		}
		var got kin.AgentResult
		decodeOne(t, r.stdout, &got)
		if !reflect.DeepEqual(&got, svc.results[id]) {
			t.Errorf("kin wait %d --json printed %+v, want %+v", id, got, svc.results[id])
		}
		if last := svc.waits[len(svc.waits)-1]; last != (kin.WaitRequest{ID: id, Timeout: kin.Duration(90 * time.Second)}) {
			t.Errorf("--timeout 90s arrived as %+v", last)
		}
	}
}

// TestWaitNoResultChannel: an agent handed nothing, without a parent
// session, has no result to check; its exit status decides.
func TestWaitNoResultChannel(t *testing.T) {
	ok, crashed := childResult(8, "", ""), childResult(9, "", "")
	ok.Agent.Exit, ok.Agent.EndReason = &kin.Exit{Code: 0, Known: true}, "exited"
	crashed.Agent.Exit, crashed.Agent.EndReason = &kin.Exit{Code: 2, Known: true}, "crashed"
	svc := &fakeService{results: map[kin.AgentID]*kin.AgentResult{8: ok, 9: crashed}}
	r := runFake(t, svc, "", "wait", "8")
	if r.code != ExitOK || r.stdout != "agent 8 (rev-123): ended without a result channel, exit 0 (exited)\n" {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
	r = runFake(t, svc, "", "wait", "9")
	if r.code != ExitNotCompleted || r.stdout != "agent 9 (rev-123): ended without a result channel, exit 2 (crashed)\n" {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestWaitTimeout(t *testing.T) {
	svc := &fakeService{waitErr: kin.Errorf(kin.ECodeTimeout, "agent 8 has not ended within 5s")}
	r := runFake(t, svc, "", "wait", "8", "--timeout", "5s")
	if r.code != ExitTimeout || r.stdout != "" || r.stderr != "kin: agent 8 has not ended within 5s (timeout)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runFake(t, svc, "", "wait", "8", "--timeout", "5s", "--json")
	var e kin.Error
	decodeOne(t, r.stderr, &e)
	if r.code != ExitTimeout || r.stdout != "" || e.Code != kin.ECodeTimeout {
		t.Errorf("--json: exit %d, stdout %q, error %+v", r.code, r.stdout, e)
	}
}

func TestWaitErrors(t *testing.T) {
	svc := &fakeService{}
	if msg := wantError(t, runFake(t, svc, "", "wait", "99", "--json"), kin.ECodeNotFound); !strings.Contains(msg, "99") {
		t.Errorf("message %q", msg)
	}
	wantError(t, runFake(t, svc, "", "wait", "abc", "--json"), kin.ECodeInvalid)
	wantError(t, runFake(t, svc, "", "wait", "-1", "--json"), kin.ECodeInvalid)
	wantUsage(t, runFake(t, svc, "", "wait"), "one agent ID")
	wantUsage(t, runFake(t, svc, "", "wait", "1", "2"), "one agent ID")
	wantUsage(t, runFake(t, svc, "", "wait", "1", "--timeout", "-1s"), "--timeout")
	wantUsage(t, runFake(t, svc, "", "wait", "1", "--timeout", "soon"), "--timeout")
	if len(svc.waits) != 1 {
		t.Errorf("bad command lines reached the service: %+v", svc.waits)
	}
}
