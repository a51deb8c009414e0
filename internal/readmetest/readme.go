// Package readmetest runs the shell blocks of a Markdown file (README.md)
// as a reader pastes them, in order, and checks their output where the file
// shows it. Only its test uses it.
//
// What runs:
//   - a ```sh block: each command (lines joined at a trailing \, here-documents
//     kept whole) must exit 0, unless its comment says it fails ("# -> kin: ...",
//     the README's way of showing an error): then it must exit non-zero;
//   - a ```console block (or a ```sh block of "$ " lines): each "$ " command
//     runs, and when output lines follow it, the combined stdout and stderr
//     must match them (see Match); a command shown without output must exit 0;
//   - other blocks (json, toml, text, plain) are not run;
//   - a block right after the line <!-- readme-test: skip (why) --> is not run.
//
// Each command runs in its own bash in the file's directory, with the
// environment the caller gives (kin first in PATH, KIN_HOME).
package readmetest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// SkipMarker, on the line right before a block, keeps it from running; the
// parenthesis says why.
const SkipMarker = "<!-- readme-test: skip"

// Block is one fenced block.
type Block struct {
	Line  int    // of the opening fence, 1-based
	Lang  string // sh, console, ...
	Skip  string // why it is skipped, or ""
	Steps []Step
}

// Step is one command of a block and what it must print.
type Step struct {
	Line     int
	Cmd      string
	Want     []string // expected output lines; nil: not checked
	MustFail bool     // an error the file shows ("# -> kin: ...")
}

// Runs says whether the block is run.
func (b Block) Runs() bool { return b.Skip == "" && (b.Lang == "sh" || b.Lang == "console") }

// Parse splits a Markdown text into its fenced blocks.
func Parse(text string) []Block {
	lines := strings.Split(text, "\n")
	var out []Block
	for i := 0; i < len(lines); i++ {
		fence, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		b := Block{Line: i + 1, Lang: strings.TrimSpace(fence)}
		if i > 0 {
			if why, ok := strings.CutPrefix(strings.TrimSpace(lines[i-1]), SkipMarker); ok {
				b.Skip = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(why), "-->"))
				if b.Skip == "" {
					b.Skip = "(no reason given)"
				}
			}
		}
		var body []string
		start := i + 2
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		console := b.Lang == "console"
		if b.Lang == "sh" {
			for _, l := range body {
				if strings.HasPrefix(l, "$ ") {
					console = true
				}
			}
		}
		if console {
			b.Steps = consoleSteps(body, start)
		} else {
			b.Steps = shSteps(body, start)
		}
		out = append(out, b)
	}
	return out
}

// continues says whether a command goes on to the next line: a trailing
// backslash, or a single quote left open (on its last line, before a " #"
// comment, whose own quotes are prose).
func continues(cmd string) bool {
	if strings.HasSuffix(cmd, "\\") {
		return true
	}
	code := cmd
	if i := strings.LastIndex(cmd, "\n"); i >= 0 && strings.Count(cmd[:i], "'")%2 == 0 {
		code = cmd[i+1:]
	}
	if i := strings.Index(code, " #"); i >= 0 {
		code = code[:i]
	}
	return strings.Count(code, "'")%2 == 1
}

func consoleSteps(body []string, first int) []Step {
	var steps []Step
	for i := 0; i < len(body); i++ {
		c, ok := strings.CutPrefix(body[i], "$ ")
		if !ok {
			continue
		}
		s := Step{Line: first + i, Cmd: c}
		for continues(s.Cmd) && i+1 < len(body) {
			i++
			s.Cmd += "\n" + body[i]
		}
		for i+1 < len(body) && !strings.HasPrefix(body[i+1], "$ ") {
			i++
			s.Want = append(s.Want, body[i])
		}
		steps = append(steps, s)
	}
	return steps
}

var heredoc = regexp.MustCompile(`<<-?\s*'?"?(\w+)'?"?`)

func shSteps(body []string, first int) []Step {
	var steps []Step
	for i := 0; i < len(body); i++ {
		l := strings.TrimSpace(body[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s := Step{Line: first + i, Cmd: body[i]}
		for continues(s.Cmd) && i+1 < len(body) {
			i++
			s.Cmd += "\n" + body[i]
		}
		if m := heredoc.FindStringSubmatch(s.Cmd); m != nil {
			for i+1 < len(body) {
				i++
				s.Cmd += "\n" + body[i]
				if strings.TrimSpace(body[i]) == m[1] {
					break
				}
			}
		}
		s.MustFail = strings.Contains(s.Cmd, "# -> kin:")
		steps = append(steps, s)
	}
	return steps
}

// Runner runs steps.
type Runner struct {
	Dir string
	Env []string
	// Within is how long a checked command is re-run until its output
	// matches (agents start and end asynchronously, as for a reader who
	// runs kin tree again); a command with no output shown runs once.
	Within time.Duration
}

// Run runs one step and says what went wrong, naming its line.
func (r Runner) Run(ctx context.Context, s Step) error {
	deadline := time.Now().Add(r.Within)
	for {
		out, err := r.exec(ctx, s.Cmd)
		switch {
		case s.MustFail:
			if err == nil {
				return fmt.Errorf("line %d: %q succeeded, but the file shows it failing:\n%s", s.Line, s.Cmd, out)
			}
			return nil
		case s.Want == nil:
			if err != nil {
				return fmt.Errorf("line %d: %q: %v\n%s", s.Line, s.Cmd, err, out)
			}
			return nil
		}
		if Match(s.Want, lines(out)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("line %d: %q printed (%v):\n%s\nwant (numbers and ... vary):\n%s", s.Line, s.Cmd, err, out, strings.Join(s.Want, "\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // poll, as WaitFor does
		}
	}
}

func (r Runner) exec(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Dir, c.Env = r.Dir, r.Env
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	c.WaitDelay = 5 * time.Second
	err := c.Run()
	return out.String(), err
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Match says whether got matches want, the way a reader compares: a want
// line "..." stands for any number of lines, "..." within a line for any
// text; every run of digits for any number (ids, pids, times, ports,
// sizes); runs of spaces for any spaces; a line's trailing "# ..." comment
// after two spaces is the README's, not output. A number with a fraction
// (a latency, 1.692) stands for one with or without (2: what a float
// prints when it is whole).
func Match(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	w := strings.TrimSpace(want[0])
	if w == "..." {
		for k := 0; k <= len(got); k++ {
			if Match(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && lineRE(want[0]).MatchString(strings.TrimRight(got[0], " ")) && Match(want[1:], got[1:])
}

var (
	varying  = regexp.MustCompile(`[0-9a-f]{6,}|[0-9]+`)
	spaces   = regexp.MustCompile(` +`)
	trailing = regexp.MustCompile(`\s{2,}# .*$`)
)

func lineRE(w string) *regexp.Regexp {
	w = strings.TrimRight(trailing.ReplaceAllString(w, ""), " ")
	var b strings.Builder
	b.WriteString("^")
	for i, part := range strings.Split(w, "...") {
		if i > 0 {
			b.WriteString(".*")
		}
		p := regexp.QuoteMeta(part)
		p = varying.ReplaceAllStringFunc(p, func(m string) string {
			switch {
			case strings.Trim(m, "0123456789") == "":
				return `[0-9]+`
			case strings.ContainsAny(m, "0123456789"):
				return `[0-9a-f]+` // a hash or a name's random suffix
			}
			return m
		})
		p = strings.ReplaceAll(p, `[0-9]+\.[0-9]+`, `[0-9]+(?:\.[0-9]+)?`)
		p = spaces.ReplaceAllString(p, ` +`)
		b.WriteString(p)
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}
