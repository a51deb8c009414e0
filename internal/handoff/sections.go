package handoff

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// SectionStyle is how a section of result.md was introduced.
type SectionStyle string

const (
	StyleHeading SectionStyle = "heading" // "# Summary", "## Summary", ... "###### Summary"
	StyleLabel   SectionStyle = "label"   // "Summary:" at the start of a line (seed 001's example result.md)
)

// LabelLevel is the Level of a label section: below every heading, so a
// label inside "## Findings" does not end it.
const LabelLevel = 7

// Section is one section of a result.md.
type Section struct {
	Title string       `json:"title"` // as written, without "#", emphasis or the trailing ':'
	Style SectionStyle `json:"style"`
	Level int          `json:"level"` // 1-6 for headings, LabelLevel for labels
	Line  int          `json:"line"`  // 1-based line of the heading or label
	Body  string       `json:"body"`  // the section's text, trimmed
}

// SectionKey is the form in which section names are compared: lower case,
// runs of white space as one space.
func SectionKey(name string) string {
	return strings.ToLower(strings.Join(strings.Fields(name), " "))
}

// ParseSections splits Markdown into sections. Two styles are recognised, and
// may be mixed:
//
//   - ATX headings: up to three spaces, one to six '#', a space, the title;
//     closing '#'s, a trailing ':' and wrapping ** or __ are dropped. A
//     heading's body runs to the next heading of the same or a higher level.
//   - Label lines, as in seed 001's example result.md: at the start of a line,
//     "Summary:" alone or followed by a space and text ("Summary: it is
//     clear"), optionally emphasised ("**Summary:**", "**Summary**:"). The
//     label starts with a letter and holds at most 64 bytes of letters,
//     digits, spaces and - _ / ( ) & ' , . A label's body runs to the next
//     heading or label. When labels are given, only label lines whose title
//     is one of them (compared by SectionKey) count, so a body line such as
//     "Severity: high" does not split a section; with none given every
//     label-shaped line does.
//
// Nothing inside a fenced code block (``` or ~~~) starts a section: patches
// and examples stay in their section. Setext headings (underlined with = or
// -) are not recognised. Text before the first section belongs to none.
func ParseSections(md string, labels ...string) []Section {
	known := map[string]bool{}
	for _, l := range labels {
		known[SectionKey(l)] = true
	}
	lines := strings.Split(md, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	type start struct {
		idx    int
		inline string
		sec    Section
	}
	var starts []start
	fence := ""
	for i, line := range lines {
		if fence != "" {
			if closesFence(line, fence) {
				fence = ""
			}
			continue
		}
		if f := opensFence(line); f != "" {
			fence = f
			continue
		}
		if level, title, ok := parseHeading(line); ok {
			starts = append(starts, start{idx: i, sec: Section{Title: title, Style: StyleHeading, Level: level, Line: i + 1}})
			continue
		}
		if title, inline, ok := parseLabel(line); ok && (len(known) == 0 || known[SectionKey(title)]) {
			starts = append(starts, start{idx: i, inline: inline, sec: Section{Title: title, Style: StyleLabel, Level: LabelLevel, Line: i + 1}})
		}
	}
	out := make([]Section, 0, len(starts))
	for k, s := range starts {
		end := len(lines)
		for _, t := range starts[k+1:] {
			if t.sec.Level <= s.sec.Level {
				end = t.idx
				break
			}
		}
		body := strings.Join(lines[s.idx+1:end], "\n")
		if s.inline != "" {
			body = s.inline + "\n" + body
		}
		s.sec.Body = strings.TrimSpace(body)
		out = append(out, s.sec)
	}
	return out
}

// indent strips up to three leading spaces, as Markdown allows before a
// heading or a fence; ok is false for more.
func indent(line string) (rest string, ok bool) {
	for i := 0; i < 4; i++ {
		if i == len(line) || line[i] != ' ' {
			return line[i:], true
		}
	}
	return "", false
}

func opensFence(line string) string {
	s, ok := indent(line)
	if !ok || len(s) < 3 || (s[0] != '`' && s[0] != '~') {
		return ""
	}
	n := 0
	for n < len(s) && s[n] == s[0] {
		n++
	}
	if n < 3 {
		return ""
	}
	return s[:n]
}

func closesFence(line, fence string) bool {
	s, ok := indent(line)
	if !ok {
		return false
	}
	n := 0
	for n < len(s) && s[n] == fence[0] {
		n++
	}
	return n >= len(fence) && strings.TrimSpace(s[n:]) == ""
}

func parseHeading(line string) (level int, title string, ok bool) {
	s, ok := indent(line)
	if !ok {
		return 0, "", false
	}
	for level < len(s) && s[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || (level < len(s) && s[level] != ' ' && s[level] != '\t') {
		return 0, "", false
	}
	t := strings.TrimSpace(s[level:])
	if c := strings.TrimRight(t, "#"); c != t && (c == "" || strings.HasSuffix(c, " ") || strings.HasSuffix(c, "\t")) {
		t = strings.TrimSpace(c) // a closing sequence: "## Summary ##"
	}
	return level, cleanTitle(t), true
}

// cleanTitle drops a trailing ':' and wrapping emphasis: "**Summary:**",
// "**Summary**:" and "Summary:" are all "Summary".
func cleanTitle(t string) string {
	t = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), ":"))
	for _, m := range []string{"**", "__", "*", "_"} {
		if len(t) > 2*len(m) && strings.HasPrefix(t, m) && strings.HasSuffix(t, m) {
			t = t[len(m) : len(t)-len(m)]
			break
		}
	}
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), ":"))
}

func parseLabel(line string) (title, inline string, ok bool) {
	s := strings.TrimRight(line, " \t")
	m := ""
	for _, mk := range []string{"**", "__"} {
		if strings.HasPrefix(s, mk) {
			m, s = mk, s[len(mk):]
			break
		}
	}
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return "", "", false
	}
	title, rest := s[:i], s[i+1:]
	if m != "" {
		switch {
		case strings.HasSuffix(title, m): // **Summary**:
			title = title[:len(title)-len(m)]
		case strings.HasPrefix(rest, m): // **Summary:**
			rest = rest[len(m):]
		default:
			return "", "", false
		}
	}
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' { // "https://...", "a:b"
		return "", "", false
	}
	if !isLabel(title) {
		return "", "", false
	}
	return title, strings.TrimSpace(rest), true
}

// isLabel: a short name starting with a letter, as a section title is
// written in a label line.
func isLabel(s string) bool {
	if s == "" || len(s) > MaxNameLen || !utf8.ValidString(s) {
		return false
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if !unicode.IsLetter(first) || unicode.IsSpace(last) {
		return false
	}
	for _, r := range s {
		if !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' || strings.ContainsRune("-_/()&',", r)) {
			return false
		}
	}
	return true
}
