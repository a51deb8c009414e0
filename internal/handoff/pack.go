package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// PackOptions bound a context pack. Zero fields take the defaults.
type PackOptions struct {
	MaxResultBytes   int64 // of each result.md; default DefaultResultBytes
	MaxArtifactBytes int64 // an artifact is inlined only up to this size; default 16 KiB
	ArtifactBudget   int64 // inlined artifact bytes per child; default 64 KiB
}

// Defaults of PackOptions, and how many artifacts a child's pack lists.
const (
	DefaultPackArtifactBytes = 16 << 10
	DefaultPackBudget        = 64 << 10
	MaxPackArtifacts         = 1000
	maxSmallFile             = 256 // agent, session, status
	maxTaskLine              = 200
)

// Pack is what a parent's context should include about its children (seed
// 001): each child's result.md, its refs summarised, and the artifacts it
// needs. It never includes a child's messages.jsonl, events.jsonl or
// anything else from its session: ContextPack reads only the files named
// here.
type Pack struct {
	Children []PackChild `json:"children"`
}

// PackChild is one child in a Pack.
type PackChild struct {
	Name            string         `json:"name"`              // the agent file, else the folder's name (ContextPackRoots: the name given)
	Agent           string         `json:"agent,omitempty"`   // ContextPackRoots: the agent file (kin writes the child's id there)
	Session         string         `json:"session,omitempty"` // the session file
	Status          string         `json:"status"`            // the status file; "unknown" without one
	Task            string         `json:"task,omitempty"`    // the first non-empty line of handoff.md
	Result          string         `json:"result"`            // result.md, up to MaxResultBytes
	ResultTruncated bool           `json:"result_truncated,omitempty"`
	Refs            []Ref          `json:"refs"`
	Artifacts       []PackArtifact `json:"artifacts"`
	Notes           []string       `json:"notes,omitempty"` // what was left out, and why
}

// PackArtifact is one file under a child's artifact/.
type PackArtifact struct {
	Path     string `json:"path"`
	Kind     string `json:"kind,omitempty"`
	Size     int64  `json:"size"`
	Hash     string `json:"hash,omitempty"`
	Included bool   `json:"included"`          // Content holds the whole file
	Content  string `json:"content,omitempty"` // UTF-8 text
	Reason   string `json:"reason,omitempty"`  // why it is not included
}

func (opts PackOptions) withDefaults() PackOptions {
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = DefaultResultBytes
	}
	if opts.MaxArtifactBytes <= 0 {
		opts.MaxArtifactBytes = DefaultPackArtifactBytes
	}
	if opts.ArtifactBudget <= 0 {
		opts.ArtifactBudget = DefaultPackBudget
	}
	return opts
}

// ContextPack builds the pack for the given context/child/<child>/ folders.
// From each it reads only agent, session, status, handoff.md (its first line),
// result.md, refs.jsonl, contract.json and artifact/, never following a
// symlink. An artifact is "needed", and its text inlined, when refs.jsonl
// names it or contract.json lists it, it is UTF-8 text without NUL bytes, it
// fits MaxArtifactBytes and the child's budget has room; every other regular
// file under artifact/ is listed with its size and hash only. Children are
// ordered by name, refs as in refs.jsonl, artifacts by path: the same folders
// always give the same pack. A folder that cannot be opened is an error; any
// problem inside one is a note.
func ContextPack(childDirs []string, opts PackOptions) (*Pack, error) {
	opts = opts.withDefaults()
	p := &Pack{Children: []PackChild{}}
	sorted := make([]string, len(childDirs))
	for i, cd := range childDirs {
		sorted[i] = filepath.Clean(cd)
	}
	sort.Strings(sorted) // so that children with equal names keep one order
	for _, cd := range sorted {
		c, err := packChild(cd, opts)
		if err != nil {
			return nil, fmt.Errorf("context pack of %s: %w", cd, err)
		}
		p.Children = append(p.Children, c)
	}
	sort.SliceStable(p.Children, func(i, j int) bool { return p.Children[i].Name < p.Children[j].Name })
	return p, nil
}

// PackDir is a child folder already opened, for ContextPackRoots.
type PackDir struct {
	Name string   // the child's name: the folder's name
	Root *os.Root // the folder; the caller closes it
}

// ContextPackRoots is ContextPack for folders the caller has opened (a
// daemon running as root opens them without following links on the way
// there). Each child is named by its PackDir's Name whatever its agent file
// says; the agent file's value goes to PackChild.Agent.
func ContextPackRoots(dirs []PackDir, opts PackOptions) (*Pack, error) {
	opts = opts.withDefaults()
	p := &Pack{Children: []PackChild{}}
	for _, pd := range dirs {
		c, err := packDir(&dir{root: pd.Root, borrowed: true}, pd.Name, true, opts)
		if err != nil {
			return nil, fmt.Errorf("context pack of %s: %w", pd.Name, err)
		}
		p.Children = append(p.Children, c)
	}
	sort.SliceStable(p.Children, func(i, j int) bool { return p.Children[i].Name < p.Children[j].Name })
	return p, nil
}

func packChild(childDir string, opts PackOptions) (PackChild, error) {
	d, err := openDir(childDir)
	if err != nil {
		return PackChild{}, err
	}
	defer d.Close()
	return packDir(d, filepath.Base(filepath.Clean(childDir)), false, opts)
}

func packDir(d *dir, name string, named bool, opts PackOptions) (PackChild, error) {
	c := PackChild{Name: name, Status: "unknown", Refs: []Ref{}, Artifacts: []PackArtifact{}}
	agentDst := &c.Name
	if named {
		agentDst = &c.Agent
	}
	note := func(format string, args ...any) { c.Notes = append(c.Notes, fmt.Sprintf(format, args...)) }

	// read reads up to max bytes of a file; ok is false when it is absent
	// or unusable, more when it was longer.
	read := func(name string, max int64) (text string, ok, more bool, err error) {
		e, err := d.look(name)
		if err != nil {
			return "", false, false, err
		}
		if e.missing != "" {
			return "", false, false, nil
		}
		if e.problem != "" {
			note("%s skipped: %s", name, strings.TrimPrefix(e.problem, name+" is "))
			return "", false, false, nil
		}
		b, more, err := d.read(name, e, max)
		if err != nil {
			note("%s skipped: %v", name, err)
			return "", false, false, nil
		}
		if more {
			note("%s truncated at %d of %d bytes", name, max, e.info.Size())
		}
		return strings.ToValidUTF8(string(trimPartialRune(b)), "\uFFFD"), true, more, nil
	}
	small := func(name string, max int64) (string, bool, error) {
		s, ok, _, err := read(name, max)
		return s, ok, err
	}
	oneLine := func(s string) string {
		s = strings.TrimSpace(s)
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = strings.TrimSpace(s[:i])
		}
		return strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return -1
			}
			return r
		}, s)
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{FileAgent, agentDst}, {FileSession, &c.Session}, {FileStatus, &c.Status}} {
		s, ok, err := small(f.name, maxSmallFile)
		if err != nil {
			return PackChild{}, err
		}
		if v := oneLine(s); ok && v != "" {
			*f.dst = v
		}
	}
	task, _, err := small(FileHandoff, MaxTaskBytes)
	if err != nil {
		return PackChild{}, err
	}
	for _, l := range strings.Split(task, "\n") {
		if l = oneLine(l); l != "" {
			c.Task = clip(l, maxTaskLine)
			break
		}
	}

	res, ok, more, err := read(FileResult, opts.MaxResultBytes)
	if err != nil {
		return PackChild{}, err
	}
	if !ok {
		note("no result.md yet")
	}
	c.Result, c.ResultTruncated = res, more

	needed := map[string]bool{}
	kinds := map[string]string{}
	refs, ok, err := small(FileRefs, MaxRefsFile)
	if err != nil {
		return PackChild{}, err
	}
	if ok {
		good, _, bad := parseRefs([]byte(refs))
		for _, b := range bad {
			note("skipped: %s", kinMessage(b.err))
		}
		c.Refs = append(c.Refs, good...)
		for _, r := range good {
			if !strings.HasPrefix(r.Path, "/") && !hasDotDot(r.Path) {
				p := path.Clean(r.Path)
				needed[p] = true
				if kinds[p] == "" {
					kinds[p] = r.Kind
				}
			}
		}
	}
	contract, ok, err := small(FileContract, MaxContractSize)
	if err != nil {
		return PackChild{}, err
	}
	if ok {
		ct, err := ParseContract([]byte(contract))
		if err != nil {
			note("contract.json ignored: %s", kinMessage(err))
		}
		for _, a := range ct.Artifacts {
			needed[a.Path] = true
			if a.Kind != "" {
				kinds[a.Path] = a.Kind
			}
		}
	}

	fi, err := d.root.Lstat(ArtifactDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return PackChild{}, err
	case !fi.IsDir():
		note("artifact/ skipped: it is %s", describeMode(fi.Mode()))
		return c, nil
	}
	budget := opts.ArtifactBudget
	err = fs.WalkDir(d.root.FS(), ArtifactDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			note("%s skipped: %v", p, err)
			return nil
		}
		if de.IsDir() {
			return nil
		}
		if len(c.Artifacts) == MaxPackArtifacts {
			note("more than %d artifacts; the rest are not listed", MaxPackArtifacts)
			return fs.SkipAll
		}
		e, err := d.look(p)
		if err != nil {
			return err
		}
		if !e.ok() {
			note("%s skipped: %s", p, strings.TrimPrefix(e.problem, p+" is "))
			return nil
		}
		a := PackArtifact{Path: p, Kind: kinds[p], Size: e.info.Size()}
		if h, err := d.hash(p, e); err == nil {
			a.Hash = h
		}
		switch {
		case !needed[p]:
			a.Reason = "not named in refs.jsonl or the contract"
		case a.Size > opts.MaxArtifactBytes:
			a.Reason = fmt.Sprintf("larger than %d bytes", opts.MaxArtifactBytes)
		case a.Size > budget:
			a.Reason = fmt.Sprintf("the pack's artifact budget of %d bytes is spent", opts.ArtifactBudget)
		default:
			b, more, err := d.read(p, e, opts.MaxArtifactBytes)
			switch {
			case err != nil:
				a.Reason = "unreadable: " + err.Error()
			case more:
				a.Reason = fmt.Sprintf("larger than %d bytes", opts.MaxArtifactBytes)
			case !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0:
				a.Reason = "not text"
			default:
				a.Included, a.Content = true, string(b)
				budget -= int64(len(b))
			}
		}
		c.Artifacts = append(c.Artifacts, a)
		return nil
	})
	if err != nil {
		return PackChild{}, err
	}
	return c, nil
}

// JSON is the pack as indented JSON, ending in a newline.
func (p *Pack) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Text is the pack as Markdown for a model's context: per child a heading,
// its status and task, result.md, one line per ref, and each artifact,
// inlined in a code fence longer than any backtick run inside it.
func (p *Pack) Text() string {
	var b strings.Builder
	n := len(p.Children)
	fmt.Fprintf(&b, "# Context pack: %d %s\n", n, plural(n, "child", "children"))
	for _, c := range p.Children {
		fmt.Fprintf(&b, "\n## Child %s\n\n", c.Name)
		fmt.Fprintf(&b, "status: %s\n", c.Status)
		if c.Session != "" {
			fmt.Fprintf(&b, "session: %s\n", c.Session)
		}
		if c.Task != "" {
			fmt.Fprintf(&b, "task: %s\n", c.Task)
		}
		b.WriteString("\n### result.md\n\n")
		if c.Result == "" {
			b.WriteString("(none)\n")
		} else {
			writeFenced(&b, "markdown", c.Result)
			if c.ResultTruncated {
				b.WriteString("(truncated)\n")
			}
		}
		fmt.Fprintf(&b, "\n### refs (%d)\n\n", len(c.Refs))
		if len(c.Refs) == 0 {
			b.WriteString("(none)\n")
		}
		for _, r := range c.Refs {
			b.WriteString("- " + r.Path)
			if r.Kind != "" {
				b.WriteString(" [" + r.Kind + "]")
			}
			if r.Hash != "" {
				b.WriteString(" " + shortHash(r.Hash))
			}
			if r.Summary != "" {
				b.WriteString(": " + r.Summary)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\n### artifacts (%d)\n", len(c.Artifacts))
		if len(c.Artifacts) == 0 {
			b.WriteString("\n(none)\n")
		}
		for _, a := range c.Artifacts {
			b.WriteString("\n- " + a.Path)
			if a.Kind != "" {
				b.WriteString(" [" + a.Kind + "]")
			}
			fmt.Fprintf(&b, " %d bytes", a.Size)
			if a.Hash != "" {
				b.WriteString(" " + shortHash(a.Hash))
			}
			if !a.Included {
				b.WriteString(" (not included: " + a.Reason + ")\n")
				continue
			}
			b.WriteString("\n\n")
			writeFenced(&b, a.Kind, a.Content)
		}
		if len(c.Notes) > 0 {
			b.WriteString("\n### notes\n\n")
			for _, n := range c.Notes {
				b.WriteString("- " + n + "\n")
			}
		}
	}
	return b.String()
}

func writeFenced(b *strings.Builder, info, content string) {
	longest, run := 0, 0
	for i := 0; i < len(content); i++ {
		if content[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	if strings.ContainsAny(info, "` ") {
		info = ""
	}
	b.WriteString(fence + info + "\n" + content)
	if !strings.HasSuffix(content, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(fence + "\n")
}

// shortHash keeps "sha256:" and 12 hex digits: enough to tell files apart
// in a summary; the JSON form has the whole hash.
func shortHash(h string) string {
	if len(h) > len(HashPrefix)+12 {
		return h[:len(HashPrefix)+12]
	}
	return h
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
