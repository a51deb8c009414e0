package handoff_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
)

// sec is a compact form of a Section for tables: "Title|style|level|line|body".
func sec(s handoff.Section) string {
	return fmt.Sprintf("%s|%s|%d|%d|%s", s.Title, s.Style, s.Level, s.Line, s.Body)
}

func TestParseSections(t *testing.T) {
	tests := []struct {
		name   string
		md     string
		labels []string
		want   []string
	}{
		{"seed 001's example result.md, verbatim", seed(t, "result.md"), nil, []string{
			"Summary|label|7|1|The mount ABI is mostly clear, but it needs explicit same-directory atomic\nrename requirements for queue claims.",
			"Findings|label|7|5|1. ...\n2. ...",
			"Suggested patch|label|7|9|...",
		}},
		{"seed 001's example handoff.md", seed(t, "handoff.md"), nil, []string{
			"Task|label|7|1|Review the mount ABI section.",
			"Scope|label|7|3|- Read spec/agent-tool-security.md\n- Check whether bind/rbind/noexec/nosuid/nodev semantics are clear\n- Do not edit files\n- Return issues and proposed patches",
			"Output|label|7|9|- summary\n- concrete suggested changes\n- risk notes",
		}},
		{"headings", "# Summary\nclear\n\n## Findings\n1. a\n", nil, []string{
			"Summary|heading|1|1|clear\n\n## Findings\n1. a",
			"Findings|heading|2|4|1. a",
		}},
		{"same-level headings end each other", "## Summary\nclear\n## Findings\na\n### Detail\nd\n## Suggested patch:\np", nil, []string{
			"Summary|heading|2|1|clear",
			"Findings|heading|2|3|a\n### Detail\nd",
			"Detail|heading|3|5|d",
			"Suggested patch|heading|2|7|p",
		}},
		{"heading decorations", "#   Summary   ##\nx\n###### **Risk notes:**\ny\n## Findings ##   \nz\n## C# #\nw", nil, []string{
			"Summary|heading|1|1|x\n###### **Risk notes:**\ny\n## Findings ##   \nz\n## C# #\nw",
			"Risk notes|heading|6|3|y", "Findings|heading|2|5|z", "C#|heading|2|7|w",
		}},
		{"up to three spaces before a heading", "   # Summary\nx\n    # not a heading\n", nil, []string{
			"Summary|heading|1|1|x\n    # not a heading",
		}},
		{"not headings", "#Summary\n####### seven\n#\tTabbed\nx", nil, []string{"Tabbed|heading|1|3|x"}},
		{"an empty heading ends a section", "## Summary\nx\n##\ny", nil, []string{"Summary|heading|2|1|x", "|heading|2|3|y"}},
		{"label with inline text", "Summary: it is clear\nmore\nFindings:\n1. a", nil, []string{
			"Summary|label|7|1|it is clear\nmore", "Findings|label|7|3|1. a",
		}},
		{"emphasised labels", "**Summary:** clear\n**Findings**:\nf\n__Suggested patch:__\np\n**Bold** text: no", nil, []string{
			"Summary|label|7|1|clear", "Findings|label|7|2|f", "Suggested patch|label|7|4|p\n**Bold** text: no",
		}},
		{"lines that are not labels", "Summary:\nhttps://example.com/x\nkey:value\n  Indented: no\n- Listed: no\n1. Numbered: no\n2nd: no\nA very long label that goes on and on and on and on past sixty four bytes:\n", nil, []string{
			"Summary|label|7|1|https://example.com/x\nkey:value\n  Indented: no\n- Listed: no\n1. Numbered: no\n2nd: no\nA very long label that goes on and on and on and on past sixty four bytes:",
		}},
		{"case-insensitive known labels only", "summary:\nSeverity: high\ntext\nFINDINGS:\nf", []string{"Summary", "Findings"}, []string{
			"summary|label|7|1|Severity: high\ntext", "FINDINGS|label|7|4|f",
		}},
		{"without known labels every label counts", "Summary:\nSeverity: high\ntext", nil, []string{
			"Summary|label|7|1|", "Severity|label|7|2|high\ntext",
		}},
		{"labels inside a heading do not end it", "## Result\nSummary:\ns\nFindings:\nf\n## Other\no", nil, []string{
			"Result|heading|2|1|Summary:\ns\nFindings:\nf", "Summary|label|7|2|s", "Findings|label|7|4|f", "Other|heading|2|6|o",
		}},
		{"a heading ends a label section", "Summary:\ns\n# Findings\nf", nil, []string{"Summary|label|7|1|s", "Findings|heading|1|3|f"}},
		{"code fences hide headings and labels", "Suggested patch:\n```diff\n# comment\nFindings:\n```\nafter\n~~~~\n## x\n~~~\n~~~~\nFindings:\nf", nil, []string{
			"Suggested patch|label|7|1|```diff\n# comment\nFindings:\n```\nafter\n~~~~\n## x\n~~~\n~~~~",
			"Findings|label|7|11|f",
		}},
		{"an unclosed fence runs to the end", "Summary:\ns\n```\nFindings:\nf", nil, []string{"Summary|label|7|1|s\n```\nFindings:\nf"}},
		{"CRLF line ends", "Summary:\r\nclear\r\n\r\n# Findings\r\nf\r\n", nil, []string{"Summary|label|7|1|clear", "Findings|heading|1|4|f"}},
		{"empty and white-space bodies", "Summary:\n\n   \n\t\nFindings:\n", nil, []string{"Summary|label|7|1|", "Findings|label|7|5|"}},
		{"text before the first section belongs to none", "preamble\n\nSummary:\ns", nil, []string{"Summary|label|7|3|s"}},
		{"no sections", "just text\n", nil, nil},
		{"empty", "", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := handoff.ParseSections(tc.md, tc.labels...)
			var g []string
			for _, s := range got {
				g = append(g, sec(s))
			}
			if strings.Join(g, "\n--\n") != strings.Join(tc.want, "\n--\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(g, "\n--\n"), strings.Join(tc.want, "\n--\n"))
			}
		})
	}
}

func TestSectionKey(t *testing.T) {
	for in, want := range map[string]string{
		"Summary": "summary", "  Suggested   patch ": "suggested patch", "RISK\tNotes": "risk notes", "ÜBER": "über",
	} {
		if got := handoff.SectionKey(in); got != want {
			t.Errorf("SectionKey(%q) = %q, want %q", in, got, want)
		}
	}
}
