package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestRead(t *testing.T) {
	svc := &fakeService{files: map[string]string{
		"researcher:memory/notes.md": "# Notes\n\x00binary\xff",
		"7:a:b.txt":                  "colon\n",
	}}
	r := runFake(t, svc, "", "read", "researcher:memory/notes.md")
	wantOK(t, r)
	if r.stdout != "# Notes\n\x00binary\xff" {
		t.Errorf("stdout %q", r.stdout)
	}
	// An id with '#', a path with ':' (split at the first), a reader.
	r = runFake(t, svc, "", "read", "#7:a:b.txt", "--as", "9", "--json")
	wantOK(t, r)
	if r.stdout != "colon\n" {
		t.Errorf("stdout %q; --json does not wrap the bytes", r.stdout)
	}
	want := []kin.ReadRequest{{Owner: "researcher", Path: "memory/notes.md"}, {Reader: 9, Owner: "7", Path: "a:b.txt"}}
	if !reflect.DeepEqual(svc.reads, want) {
		t.Errorf("requests %+v, want %+v", svc.reads, want)
	}
}

func TestReadErrors(t *testing.T) {
	svc := &fakeService{}
	wantUsage(t, runFake(t, svc, "", "read"), "one AGENT:PATH")
	wantUsage(t, runFake(t, svc, "", "read", "a:b", "c:d"), "one AGENT:PATH")
	wantUsage(t, runFake(t, svc, "", "read", "notes.md"), `"notes.md" is not AGENT:PATH`)
	wantUsage(t, runFake(t, svc, "", "read", ":notes.md"), "names no agent")
	wantUsage(t, runFake(t, svc, "", "read", "writer:"), "names no path")
	wantUsage(t, runFake(t, svc, "", "read", "writer:a", "--as", "me"), "--as")
	if len(svc.reads) != 0 {
		t.Errorf("bad command lines reached the service: %+v", svc.reads)
	}
	msg := wantError(t, runFake(t, svc, "", "read", "writer:SOUL.md", "--json"), kin.ECodeDenied)
	if !strings.Contains(msg, "SOUL.md") {
		t.Errorf("message %q", msg)
	}
}
