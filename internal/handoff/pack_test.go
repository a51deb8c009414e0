package handoff_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

func TestContextPackLimits(t *testing.T) {
	dir := t.TempDir()
	child := filepath.Join(dir, "rev-1")
	writeTree(t, child, map[string]string{
		"result.md":        "Summary: é" + strings.Repeat("x", 100),
		"status":           "completed\nextra line\x1b[31m",
		"refs.jsonl":       `{"path":"artifact/a.txt"}` + "\n" + `{"path":"artifact/b.txt"}` + "\n" + `{"path":"artifact/big.txt"}` + "\n" + `{"path":"../x"}`,
		"artifact/a.txt":   strings.Repeat("a", 30),
		"artifact/b.txt":   strings.Repeat("b", 30),
		"artifact/big.txt": strings.Repeat("c", 60),
		"result.md.d/":     "",
	})
	p, err := handoff.ContextPack([]string{child}, handoff.PackOptions{MaxResultBytes: 10, MaxArtifactBytes: 50, ArtifactBudget: 40})
	if err != nil {
		t.Fatal(err)
	}
	c := p.Children[0]
	// 10 bytes would cut "é" in half: the pack keeps whole characters.
	if c.Result != "Summary: é"[:len("Summary: ")] || !c.ResultTruncated {
		t.Errorf("result %q truncated %v", c.Result, c.ResultTruncated)
	}
	if c.Status != "completed" || c.Name != "rev-1" {
		t.Errorf("status %q name %q", c.Status, c.Name)
	}
	var got []string
	for _, a := range c.Artifacts {
		got = append(got, a.Path+":"+map[bool]string{true: "included", false: a.Reason}[a.Included])
	}
	want := "artifact/a.txt:included|artifact/b.txt:the pack's artifact budget of 40 bytes is spent|artifact/big.txt:larger than 50 bytes"
	if strings.Join(got, "|") != want {
		t.Errorf("artifacts\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	if !strings.Contains(p.Text(), "(truncated)") || !strings.Contains(strings.Join(c.Notes, "\n"), "result.md truncated at 10 of 111 bytes") {
		t.Errorf("the truncation is not said:\n%s", p.Text())
	}

	// An artifact "folder" that is a file is noted, not followed.
	writeTree(t, filepath.Join(dir, "rev-2"), map[string]string{"artifact": "x", "result.md": "->/etc/passwd"})
	p, err = handoff.ContextPack([]string{filepath.Join(dir, "rev-2")}, handoff.PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Children[0].Notes, "\n")
	for _, w := range []string{"result.md skipped: a symlink", "no result.md yet", "artifact/ skipped: it is a regular file"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes %q lack %q", notes, w)
		}
	}
	if p.Children[0].Result != "" {
		t.Error("a symlinked result.md was followed")
	}

	p, err = handoff.ContextPack(nil, handoff.PackOptions{})
	if err != nil || p.Text() != "# Context pack: 0 children\n" {
		t.Errorf("empty pack: %v %q", err, p.Text())
	}
}
