package cli

import (
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

func TestAncestors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	r := kinAt(t, d, "ancestors", "7")
	wantOK(t, r)
	want := "#7 LaTeX-Formatter (gen 2) responsible: Dr. Schmidt\n" +
		"#3 Report-Writer (gen 1) responsible: Dr. Schmidt\n" +
		"#1 Research-Coordinator (gen 0) responsible: Dr. Schmidt\n"
	if r.stdout != want {
		t.Errorf("output:\n%s\nwant:\n%s", r.stdout, want)
	}

	r = kinAt(t, d, "ancestors", "7", "--json")
	wantOK(t, r)
	var chain []*kin.Agent
	decodeOne(t, r.stdout, &chain)
	if len(chain) != 3 || chain[0].ID != 7 || chain[1].ID != 3 || chain[2].ID != 1 {
		t.Errorf("chain = %v", chain)
	}

	r = kinAt(t, d, "ancestors", "1", "--json")
	wantOK(t, r)
	decodeOne(t, r.stdout, &chain)
	if len(chain) != 1 || chain[0].ID != 1 {
		t.Errorf("root's chain = %v", chain)
	}
}

func TestAncestorsErrors(t *testing.T) {
	d := kintest.StartDaemon(t)
	seedLineage(t, d)
	wantError(t, kinAt(t, d, "ancestors", "99", "--json"), kin.ECodeNotFound)
	wantError(t, kinAt(t, d, "ancestors", "abc", "--json"), kin.ECodeInvalid)
	wantError(t, kinAt(t, d, "ancestors", "-1", "--json"), kin.ECodeInvalid)
	wantUsage(t, kinAt(t, d, "ancestors"), "one agent ID")
	wantUsage(t, kinAt(t, d, "ancestors", "7", "--bogus"), "--bogus")
}
