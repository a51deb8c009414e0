package cli

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestChildren(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "children", "1")
	wantOK(t, r)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ID") || lines[4] != "3 children" {
		t.Fatalf("output:\n%s", r.stdout)
	}
	for i, name := range []string{"Data-Collector", "Report-Writer", "Peer-Reviewer"} {
		if !strings.Contains(lines[i+1], name) {
			t.Errorf("line %d = %q, want %s", i+1, lines[i+1], name)
		}
	}

	r = kinAt(t, d, "children", "3")
	wantOK(t, r)
	if !strings.HasSuffix(r.stdout, "\n1 child\n") {
		t.Errorf("output:\n%s", r.stdout)
	}
	r = kinAt(t, d, "children", "7")
	wantOK(t, r)
	if r.stdout != "0 children\n" {
		t.Errorf("leaf: %q", r.stdout)
	}

	r = kinAt(t, d, "children", "2", "--json")
	wantOK(t, r)
	var kids []*kin.Agent
	decodeOne(t, r.stdout, &kids)
	if len(kids) != 2 || kids[0].Name != "Web-Scraper" || kids[1].Name != "API-Fetcher" {
		t.Errorf("children = %v", kids)
	}
	r = kinAt(t, d, "children", "7", "--json")
	wantOK(t, r)
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("leaf --json: %q", r.stdout)
	}
}

func TestChildrenErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	wantError(t, kinAt(t, d, "children", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "children", "abc", "--json"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "children", "0", "--json"), kin.ECodeInvalid)
	wantUsage(t, kinAt(t, d, "children"), "one agent ID")
	wantUsage(t, kinAt(t, d, "children", "1", "--bogus"), "--bogus")
}
