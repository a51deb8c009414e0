package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestViewsNameHostsInAFleet: when the agents shown run on more than one
// host, kin ps has a HOST column and kin tree a host= on each line; on one
// host the views are as they were.
func TestViewsNameHostsInAFleet(t *testing.T) {
	a := &kin.TreeNode{Agent: kin.Agent{ID: 1, Name: "root", Status: kin.StatusActive, State: kin.StateActive, Responsible: "ops", Host: "a"}}
	b := &kin.TreeNode{Agent: kin.Agent{ID: 2, Name: "kid", Parent: 1, Generation: 1, Status: kin.StatusActive, State: kin.StateActive, Host: "b"}}
	a.Children = []*kin.TreeNode{b}
	var tree bytes.Buffer
	renderTreeText(&tree, []*kin.TreeNode{a})
	if !strings.Contains(tree.String(), "#1 root  role=- gen=0 status=active state=active host=a") ||
		!strings.Contains(tree.String(), "#2 kid  role=- gen=1 status=active state=active host=b") {
		t.Errorf("tree across hosts:\n%s", tree.String())
	}
	var table bytes.Buffer
	if err := writeAgentTable(&table, []*kin.Agent{&a.Agent, &b.Agent}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 3 || !strings.HasSuffix(strings.Fields(lines[0])[len(strings.Fields(lines[0]))-1], "HOST") ||
		!strings.HasSuffix(lines[1], " a") || !strings.HasSuffix(lines[2], " b") {
		t.Errorf("ps across hosts:\n%s", table.String())
	}
	// One host: no host in either view.
	b.Host = "a"
	tree.Reset()
	renderTreeText(&tree, []*kin.TreeNode{a})
	table.Reset()
	writeAgentTable(&table, []*kin.Agent{&a.Agent, &b.Agent})
	if strings.Contains(tree.String(), "host=") || strings.Contains(table.String(), "HOST") {
		t.Errorf("one host's views name it:\n%s\n%s", tree.String(), table.String())
	}
}
