package handoff_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

// CheckRoot, given the opened result folder, reports what CheckWith does
// for its path.
func TestCheckRootMatchesCheck(t *testing.T) {
	w := newSeedWorld(t)
	want, err := handoff.Check(w.h.Contract, w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(w.resultDir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	got, err := handoff.CheckRoot(w.h.Contract, root, handoff.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CheckRoot = %s\nCheck = %s", got, want)
	}
	if _, err := root.Stat("."); err != nil {
		t.Fatalf("CheckRoot closed the caller's root: %v", err)
	}
	if _, err := handoff.CheckRoot(handoff.Contract{UnlistedArtifacts: "sometimes"}, root, handoff.CheckOptions{}); err == nil {
		t.Fatal("CheckRoot took an invalid contract")
	}
}

// ContextPackRoots names each child as told, keeps the agent file's value
// apart, and orders children by name.
func TestContextPackRootsNamesChildren(t *testing.T) {
	tmp := t.TempDir()
	var dirs []handoff.PackDir
	for _, c := range []struct{ name, id, result string }{{"zed", "9", "Summary:\nz\n"}, {"amy", "4", "Summary:\na\n"}} {
		writeTree(t, filepath.Join(tmp, c.name), map[string]string{"agent": c.id + "\n", "status": "completed\n", "result.md": c.result})
		root, err := os.OpenRoot(filepath.Join(tmp, c.name))
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		dirs = append(dirs, handoff.PackDir{Name: c.name, Root: root})
	}
	p, err := handoff.ContextPackRoots(dirs, handoff.PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Children) != 2 || p.Children[0].Name != "amy" || p.Children[0].Agent != "4" || p.Children[1].Name != "zed" ||
		p.Children[1].Agent != "9" || p.Children[0].Result != "Summary:\na\n" || p.Children[0].Status != "completed" {
		t.Fatalf("pack = %+v", p.Children)
	}
}
