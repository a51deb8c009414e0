package cli

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestAuthorize(t *testing.T) {
	svc := &fakeService{denied: map[string]string{"exec": "exec is denied by agent 3's policy"}}

	r := runFake(t, svc, "", "authorize", "--tool", "read", "--input", ` {"file_path":"/work/a.go"} `)
	if r.code != ExitOK || r.stdout != "allowed: read is allowed by agent 3's policy\n" || r.stderr != "" {
		t.Errorf("allowed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runFake(t, svc, "", "authorize", "--tool", "exec", "--agent", "7")
	if r.code != ExitError || r.stdout != "" || r.stderr != "denied: exec is denied by agent 3's policy\n" {
		t.Errorf("denied: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	want := []kin.AuthorizeRequest{
		{Tool: "read", Input: json.RawMessage(`{"file_path":"/work/a.go"}`)},
		{Agent: 7, Tool: "exec"},
	}
	if !reflect.DeepEqual(svc.authorizes, want) {
		t.Errorf("requests %+v, want %+v", svc.authorizes, want)
	}

	// --json: the decision on stdout, and the same exit statuses.
	for tool, code := range map[string]int{"read": ExitOK, "exec": ExitError} {
		r = runFake(t, svc, "", "authorize", "--tool", tool, "--json")
		if r.code != code || r.stderr != "" {
			t.Fatalf("--json %s: exit %d, stderr %q", tool, r.code, r.stderr)
		}
		var d kin.Decision
		decodeOne(t, r.stdout, &d)
		if d.Allowed != (code == ExitOK) || d.Rule != "deny "+tool && d.Rule != "allow *" || d.Agent != 3 || d.Source != kin.SourcePolicy {
			t.Errorf("--json %s: %+v", tool, d)
		}
	}
}

func TestAuthorizeErrors(t *testing.T) {
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "authorize"), `"tool" not set`)
	wantUsage(t, runFake(t, svc, "", "authorize", "--tool", ""), "--tool needs a tool name")
	wantUsage(t, runFake(t, svc, "", "authorize", "--tool", "exec", "--input", "{not json"), "--input", "not JSON")
	wantUsage(t, runFake(t, svc, "", "authorize", "--tool", "exec", "--input", ""), "--input", "not JSON")
	wantUsage(t, runFake(t, svc, "", "authorize", "--tool", "exec", "--agent", "0"), "--agent")
	wantUsage(t, runFake(t, svc, "", "authorize", "--tool", "exec", "extra"), "extra")
	if len(svc.authorizes) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.authorizes)
	}
	// An error is not a denial: it is reported as any error is.
	svc.authErr = kin.Errorf(kin.ECodeForbidden, "agent 9 is not one of yours")
	if msg := wantError(t, runFake(t, svc, "", "authorize", "--tool", "exec", "--agent", "9", "--json"), kin.ECodeForbidden); msg != "agent 9 is not one of yours" {
		t.Errorf("message %q", msg)
	}
	r := runFake(t, svc, "", "authorize", "--tool", "exec")
	if r.code != ExitError || r.stderr != "kin: agent 9 is not one of yours (forbidden)\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
