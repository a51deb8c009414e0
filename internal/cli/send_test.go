package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestSend(t *testing.T) {
	svc := &fakeService{}
	r := runFake(t, svc, "", "send", "writer", "The", "spec", "is", "in", "--session", "memory/spec.md.")
	wantOK(t, r)
	if r.stdout != "#42 from operator to 5 [default] The spec is in --session memory/spec.md.\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = runFake(t, svc, "", "send", "--session", "review", "#5", "please review")
	wantOK(t, r)
	if r.stdout != "#42 from operator to 5 [review] please review\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = runFake(t, svc, "line one\nline two\n", "send", "--json", "5", "-")
	wantOK(t, r)
	var m kin.Message
	decodeOne(t, r.stdout, &m)
	if m.Text != "line one\nline two\n" || m.Seq != 42 {
		t.Errorf("--json: %+v", m)
	}
	want := []kin.SendRequest{
		{To: "writer", Text: "The spec is in --session memory/spec.md."},
		{To: "5", Session: "review", Text: "please review"},
		{To: "5", Text: "line one\nline two\n"},
	}
	if !reflect.DeepEqual(svc.sends, want) {
		t.Errorf("requests %+v, want %+v", svc.sends, want)
	}
	// From stdin, multi-line text is printed quoted on one line.
	r = runFake(t, svc, "a\nb", "send", "5", "-")
	if r.stdout != "#42 from operator to 5 [default] \"a\\nb\"\n" {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestSendErrors(t *testing.T) {
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "send"), "needs an AGENT and a MESSAGE")
	wantUsage(t, runFake(t, svc, "", "send", "writer"), "needs an AGENT and a MESSAGE")
	wantUsage(t, runFake(t, svc, "", "send", "", "hi"), "AGENT is empty")
	if msg := wantError(t, runFake(t, svc, "", "send", "--json", "writer", "-"), kin.ECodeInvalid); msg != "the message is empty" {
		t.Errorf("message %q", msg)
	}
	wantError(t, runFake(t, svc, " \n", "send", "--json", "writer", "-"), kin.ECodeInvalid)
	big := strings.Repeat("x", kin.MaxMessageLen+1)
	if msg := wantError(t, runFake(t, svc, big, "send", "--json", "writer", "-"), kin.ECodeInvalid); !strings.Contains(msg, "longer than 65536 bytes") {
		t.Errorf("message %q", msg)
	}
	wantError(t, runFake(t, svc, "", "send", "--json", "writer", big), kin.ECodeInvalid)
	if len(svc.sends) != 0 {
		t.Errorf("bad messages reached the service: %+v", svc.sends)
	}
	// Exactly the limit is fine.
	wantOK(t, runFake(t, svc, big[1:], "send", "--json", "writer", "-"))
	svc.err = kin.Errorf(kin.ECodeNotFound, "no agent named writer")
	wantError(t, runFake(t, svc, "", "send", "--json", "writer", "hi"), kin.ECodeNotFound)
}
