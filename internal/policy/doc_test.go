package policy

import (
	"os"
	"strings"
	"testing"
)

// TestPolicyDocExamplesParse keeps docs/POLICY.md true: its policy example
// parses, and so do its policy configurations (presets, prices).
func TestPolicyDocExamplesParse(t *testing.T) {
	b, err := os.ReadFile("../../docs/POLICY.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		blocks = append(blocks, strings.SplitN(part, "```", 2)[0])
	}
	if len(blocks) != 3 {
		t.Fatalf("docs/POLICY.md has %d yaml blocks, want 3 (a policy, a configuration, prices)", len(blocks))
	}
	p, err := Parse([]byte(blocks[0]))
	if err != nil {
		t.Fatalf("the policy example: %v", err)
	}
	if p.Tools == nil || p.Models == nil || p.Budget == nil || p.Visibility == nil || len(p.Mounts) != 2 {
		t.Fatalf("the policy example parsed to %+v", p)
	}
	c, err := ParseConfig([]byte(blocks[1]))
	if err != nil {
		t.Fatalf("the configuration example: %v", err)
	}
	if _, err := c.Preset("reviewer"); err != nil {
		t.Fatal(err)
	}
	c, err = ParseConfig([]byte(blocks[2]))
	if err != nil {
		t.Fatalf("the prices example: %v", err)
	}
	if p, ok := c.Price("gpt-4o-2024-08-06"); !ok || p.Input != 2.5 {
		t.Fatalf("the prices example: gpt-4o-2024-08-06 costs %+v, %v", p, ok)
	}
}
