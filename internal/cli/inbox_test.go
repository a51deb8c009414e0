package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

func inboxMessages() []kin.Message {
	at := time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)
	return []kin.Message{
		{Seq: 12, From: 3, To: 5, Session: "default", Text: "The spec is in memory/spec.md.", At: at},
		{Seq: 15, From: 0, To: 5, Session: "review", Text: "two\nlines", At: at},
	}
}

func TestInbox(t *testing.T) {
	svc := &fakeService{inbox: inboxMessages()}
	r := runFake(t, svc, "", "inbox", "--agent", "5")
	wantOK(t, r)
	want := "#12 from 3 to 5 [default] The spec is in memory/spec.md.\n#15 from operator to 5 [review] \"two\\nlines\"\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = runFake(t, svc, "", "inbox", "--since", "12", "--json")
	wantOK(t, r)
	var m kin.Message
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m != inboxMessages()[1] || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("--json: %q", r.stdout)
	}
	if want := []kin.InboxRequest{{Agent: 5}, {Since: 12}}; !reflect.DeepEqual(svc.inboxes, want) {
		t.Errorf("requests %+v, want %+v", svc.inboxes, want)
	}
}

// TestInboxFollow: each message as it comes; an interrupt ends the follow
// with exit status 0.
func TestInboxFollow(t *testing.T) {
	svc := &fakeService{inbox: inboxMessages(), following: make(chan struct{})}
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Env{Stdin: strings.NewReader(""), Stdout: out, Stderr: out, Service: svc}.Run(ctx, []string{"inbox", "--follow", "--json"})
	}()
	// The fake writes both messages, then waits for the interrupt.
	select {
	case <-svc.following:
	case code := <-done:
		t.Fatalf("kin inbox --follow ended with %d:\n%s", code, out.String())
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit %d after the interrupt:\n%s", code, out.String())
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(out.String())))
	for i, want := range inboxMessages() {
		var m kin.Message
		if err := dec.Decode(&m); err != nil || m != want {
			t.Errorf("line %d: %+v, %v", i+1, m, err)
		}
	}
	if len(svc.inboxes) != 1 || !svc.inboxes[0].Follow {
		t.Errorf("requests %+v", svc.inboxes)
	}
}

func TestInboxErrors(t *testing.T) {
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "inbox", "--since", "-1"), "--since")
	wantUsage(t, runFake(t, svc, "", "inbox", "--agent", "0"), "--agent")
	wantUsage(t, runFake(t, svc, "", "inbox", "5"), "5")
	if len(svc.inboxes) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.inboxes)
	}
	svc.err = kin.Errorf(kin.ECodeInvalid, "name an agent: the operator has no inbox")
	wantError(t, runFake(t, svc, "", "inbox", "--json"), kin.ECodeInvalid)
}
