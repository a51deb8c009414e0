package cli

import (
	"reflect"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestResult(t *testing.T) {
	svc := &fakeService{results: map[kin.AgentID]*kin.AgentResult{
		8: childResult(8, kin.ResultContractViolated, "Summary: partial", "section \"Findings\": required, missing"),
		9: childResult(9, kin.ResultRunning, ""),
	}}
	// Text: result.md alone, so that it can be redirected to a file.
	r := runFake(t, svc, "", "result", "8")
	wantOK(t, r)
	if r.stdout != "Summary: partial\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = runFake(t, svc, "", "result", "9")
	if r.code != ExitOK || r.stdout != "" || r.stderr != "kin: agent 9 has no result.md (running)\n" {
		t.Errorf("a running agent: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	r = runFake(t, svc, "", "result", "8", "--json")
	wantOK(t, r)
	var got kin.AgentResult
	decodeOne(t, r.stdout, &got)
	if !reflect.DeepEqual(&got, svc.results[8]) {
		t.Errorf("--json printed %+v, want %+v", got, svc.results[8])
	}
	if len(svc.waits) != 0 {
		t.Errorf("kin result waited: %+v", svc.waits)
	}
}

func TestResultErrors(t *testing.T) {
	svc := &fakeService{}
	wantError(t, runFake(t, svc, "", "result", "99", "--json"), kin.ECodeNotFound)
	wantError(t, runFake(t, svc, "", "result", "x", "--json"), kin.ECodeInvalid)
	wantUsage(t, runFake(t, svc, "", "result"), "one agent ID")
	wantUsage(t, runFake(t, svc, "", "result", "1", "2"), "one agent ID")
}
