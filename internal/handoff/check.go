package handoff

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Status is how a child's handoff ended, as written to the parent's
// context/child/<child>/status. Check decides between the first two; the
// daemon sets the others from the process.
type Status string

const (
	StatusCompleted        Status = "completed"         // the result meets its contract
	StatusContractViolated Status = "contract_violated" // a result exists but breaks its contract: kept and marked
	StatusFailed           Status = "failed"            // the child failed (exit status, crash)
	StatusCancelled        Status = "cancelled"         // the child was cancelled (parent death, stop)
)

// Valid reports whether s is one of the four statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusCompleted, StatusContractViolated, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Violation codes. They are a contract with scripts: add, never rename.
const (
	VResultMissing        = "result_missing"
	VResultNotFile        = "result_not_file"
	VResultTooLarge       = "result_too_large"
	VResultNotText        = "result_not_text"
	VResultEmpty          = "result_empty"
	VSectionMissing       = "section_missing"
	VSectionEmpty         = "section_empty"
	VSectionTooLarge      = "section_too_large"
	VArtifactMissing      = "artifact_missing"
	VArtifactSymlink      = "artifact_symlink"
	VArtifactNotFile      = "artifact_not_file"
	VArtifactTooLarge     = "artifact_too_large"
	VArtifactKindMismatch = "artifact_kind_mismatch"
	VArtifactUnlisted     = "artifact_unlisted"
	VArtifactUnreadable   = "artifact_unreadable"
	VArtifactsTooMany     = "artifacts_too_many"
	VArtifactsTooLarge    = "artifacts_too_large"
	VRefsNotFile          = "refs_not_file"
	VRefsTooLarge         = "refs_too_large"
	VRefsMalformed        = "refs_malformed"
	VRefsTooMany          = "refs_too_many"
	VRefPathInvalid       = "ref_path_invalid"
	VRefMissing           = "ref_missing"
	VRefNotFile           = "ref_not_file"
	VRefUnreadable        = "ref_unreadable"
	VRefHashMismatch      = "ref_hash_mismatch"
)

// Violation is one way a result breaks its contract.
type Violation struct {
	Code     string `json:"code"`
	Subject  string `json:"subject"`  // what it is about: "result.md", `section "Risk notes"`, "artifact/patch.diff", "refs.jsonl line 2"
	Required string `json:"required"` // what the contract (or the protocol) required
	Found    string `json:"found"`    // what was there instead
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s: required %s; found %s", v.Code, v.Subject, v.Required, v.Found)
}

// SectionCheck is how one contract section was found in result.md.
type SectionCheck struct {
	Name  string `json:"name"`            // as the contract names it
	Title string `json:"title,omitempty"` // as result.md wrote it; "" when missing
	Line  int    `json:"line,omitempty"`
	Bytes int    `json:"bytes"` // of its text
	OK    bool   `json:"ok"`
}

// ArtifactFile is one regular file under artifact/.
type ArtifactFile struct {
	Path   string `json:"path"` // "artifact/patch.diff"
	Size   int64  `json:"size"`
	Hash   string `json:"hash,omitempty"` // "" when not hashed (over the limits, unreadable)
	Kind   string `json:"kind,omitempty"` // from the contract, else from refs.jsonl
	Listed bool   `json:"listed"`         // the contract lists it
}

// RefState is what Check could establish about a ref.
type RefState string

const (
	RefVerified   RefState = "verified"   // the child's hash matches the file
	RefHashed     RefState = "hashed"     // no hash was claimed; Computed is the file's
	RefMismatch   RefState = "mismatch"   // the child's hash is wrong (a violation)
	RefInvalid    RefState = "invalid"    // the path is refused, missing or not a file (a violation)
	RefUnverified RefState = "unverified" // an absolute path Check did not or could not read; see Note
)

// RefCheck is one good line of the child's refs.jsonl and what Check found.
type RefCheck struct {
	Line     int      `json:"line"`
	Ref      Ref      `json:"ref"`                // as the child wrote it
	Computed string   `json:"computed,omitempty"` // the file's hash, when read
	State    RefState `json:"state"`
	Note     string   `json:"note,omitempty"`
}

// Report is the outcome of Check. A result is never dropped: the report
// lists every violation, and the daemon keeps the result either way.
type Report struct {
	Status     Status         `json:"status"`
	Sections   []SectionCheck `json:"sections"`
	Artifacts  []ArtifactFile `json:"artifacts"`
	Refs       []RefCheck     `json:"refs"`
	Violations []Violation    `json:"violations"`
}

// String is the report for people: the status, then one violation a line.
func (r Report) String() string {
	var b strings.Builder
	b.WriteString(string(r.Status))
	if n := len(r.Violations); n > 0 {
		fmt.Fprintf(&b, ": %d violation", n)
		if n > 1 {
			b.WriteString("s")
		}
		for _, v := range r.Violations {
			b.WriteString("\n- " + v.String())
		}
	}
	return b.String()
}

// VerifiedRefs is the child's refs as the parent should keep them: every
// good line in order, relative paths cleaned, and Hash set to the hash kin
// computed (the file's true hash even where the child lied), or left empty
// where kin could not read the file: the parent's copy only carries hashes
// kin vouches for.
func (r Report) VerifiedRefs() []Ref {
	out := make([]Ref, 0, len(r.Refs))
	for _, rc := range r.Refs {
		ref := rc.Ref
		if !strings.HasPrefix(ref.Path, "/") && !hasDotDot(ref.Path) {
			ref.Path = path.Clean(ref.Path)
		}
		ref.Hash = rc.Computed
		out = append(out, ref)
	}
	return out
}

// CheckOptions adjust Check.
type CheckOptions struct {
	// AbsRoots, when not nil, confines the absolute ref paths Check reads
	// to these directories; refs elsewhere are RefUnverified. The daemon
	// reads as its own user, so it should pass the child's visible mounts:
	// otherwise a child could use the check to learn whether a file it cannot
	// read has a hash it guessed. nil reads every absolute path as given.
	AbsRoots []string
}

// Check checks the result a child left in resultDir (result.md, refs.jsonl,
// artifact/) against c, with zero CheckOptions.
func Check(c Contract, resultDir string) (Report, error) {
	return CheckWith(c, resultDir, CheckOptions{})
}

// CheckWith checks the result a child left in resultDir against c:
//
//   - result.md must be a regular file, non-empty UTF-8 text within
//     limits.result_bytes, and have every required section non-empty and
//     within its max_bytes (ParseSections, labels limited to the contract's
//     names and aliases);
//   - every required artifact must be a regular file at its path, within its
//     max_bytes; nothing under artifact/ may be a symlink or a special file;
//     the files there must stay within limits.artifacts and
//     limits.artifact_bytes, and under "reject" be listed; a contract kind
//     must match the kind refs.jsonl gives the file;
//   - refs.jsonl, when present, must parse (every bad line is named) and hold
//     at most limits.refs refs. Every ref path is refused if it has a ".."
//     element. A relative path names a file inside resultDir, which must
//     exist as a regular file reached without symlinks; it is hashed and a
//     claimed hash must match. An absolute path is read as given, following
//     symlinks, when it exists (and is under opts.AbsRoots, when set): a
//     claimed hash must match, and a hash claimed for a directory or special
//     file is a violation. An absolute path that does not exist or cannot be
//     read is RefUnverified, not a violation: the file may have been in a
//     mount kin does not see.
//
// The error is for a resultDir that cannot be read at all, or an invalid
// contract; everything the child did is in the Report.
func CheckWith(c Contract, resultDir string, opts CheckOptions) (Report, error) {
	if err := c.Validate(); err != nil {
		return Report{}, err
	}
	d, err := openDir(resultDir)
	if err != nil {
		return Report{}, fmt.Errorf("result directory: %w", err)
	}
	defer d.Close()
	return checkDir(c, d, opts)
}

// CheckRoot is CheckWith for a result directory the caller has opened (a
// daemon running as root opens it without following links on the way
// there); the caller closes root.
func CheckRoot(c Contract, root *os.Root, opts CheckOptions) (Report, error) {
	if err := c.Validate(); err != nil {
		return Report{}, err
	}
	return checkDir(c, &dir{root: root, borrowed: true}, opts)
}

func checkDir(c Contract, d *dir, opts CheckOptions) (Report, error) {
	ck := &checker{c: c, d: d, opts: opts, hashes: map[string]string{}, rep: Report{
		Sections: []SectionCheck{}, Artifacts: []ArtifactFile{}, Refs: []RefCheck{}, Violations: []Violation{}}}
	if err := ck.result(); err != nil {
		return Report{}, err
	}
	refs, lines, badLines, err := ck.readRefs()
	if err != nil {
		return Report{}, err
	}
	if err := ck.artifacts(refs); err != nil {
		return Report{}, err
	}
	ck.refViolations(badLines, len(refs))
	if int64(len(refs)) > c.Limits.Refs {
		refs, lines = refs[:c.Limits.Refs], lines[:c.Limits.Refs]
	}
	for i := range refs {
		if err := ck.ref(refs[i], lines[i]); err != nil {
			return Report{}, err
		}
	}
	ck.rep.Status = StatusCompleted
	if len(ck.rep.Violations) > 0 {
		ck.rep.Status = StatusContractViolated
	}
	return ck.rep, nil
}

type checker struct {
	c      Contract
	d      *dir
	opts   CheckOptions
	rep    Report
	hashes map[string]string // relative path -> hash, for refs to artifacts
	// A problem with refs.jsonl as a whole, reported after the artifacts.
	refsCode, refsFound string
}

func (ck *checker) violate(code, subject, required, found string) {
	ck.rep.Violations = append(ck.rep.Violations, Violation{Code: code, Subject: subject, Required: required, Found: found})
}

func (ck *checker) result() error {
	required := "a non-empty result.md"
	if names := ck.c.Required(); len(names) > 0 {
		required += " with the sections " + quoteList(names)
	}
	e, err := ck.d.look(FileResult)
	if err != nil {
		return err
	}
	var text string
	switch {
	case e.missing != "":
		ck.violate(VResultMissing, FileResult, required, "no result.md")
	case e.problem != "":
		ck.violate(VResultNotFile, FileResult, "a regular file", strings.TrimPrefix(e.problem, FileResult+" is "))
	default:
		b, more, err := ck.d.read(FileResult, e, ck.c.Limits.ResultBytes)
		if err != nil {
			ck.violate(VResultNotFile, FileResult, "a readable regular file", err.Error())
			break
		}
		if more {
			ck.violate(VResultTooLarge, FileResult, fmt.Sprintf("at most %d bytes (limits.result_bytes)", ck.c.Limits.ResultBytes),
				fmt.Sprintf("%d bytes", e.info.Size()))
		}
		if !utf8.Valid(b) && !(more && utf8.Valid(trimPartialRune(b))) {
			ck.violate(VResultNotText, FileResult, "UTF-8 text", "bytes that are not valid UTF-8")
		}
		text = strings.ToValidUTF8(string(b), "\uFFFD")
		if strings.TrimSpace(text) == "" {
			ck.violate(VResultEmpty, FileResult, required, "an empty file")
		}
	}
	ck.sections(text, e.ok())
	return nil
}

func (ck *checker) sections(text string, haveResult bool) {
	var labels []string
	for _, s := range ck.c.Sections {
		labels = append(labels, s.Name)
		labels = append(labels, s.Aliases...)
	}
	secs := ParseSections(text, labels...)
	var titles []string // every section-shaped title, for messages
	for _, s := range ParseSections(text) {
		if s.Title != "" {
			titles = append(titles, s.Title)
		}
	}
	for _, spec := range ck.c.Sections {
		keys := map[string]bool{SectionKey(spec.Name): true}
		for _, a := range spec.Aliases {
			keys[SectionKey(a)] = true
		}
		sc := SectionCheck{Name: spec.Name}
		var found []Section
		for _, s := range secs {
			if keys[SectionKey(s.Title)] {
				found = append(found, s)
				sc.Bytes += len(s.Body)
			}
		}
		if len(found) > 0 { // report the first non-empty one, else the first
			pick := found[0]
			for _, s := range found {
				if strings.TrimSpace(s.Body) != "" {
					pick = s
					break
				}
			}
			sc.Title, sc.Line = pick.Title, pick.Line
		}
		nonEmpty := sectionNonEmpty(found)
		subject := fmt.Sprintf("section %q", spec.Name)
		req := describeSection(spec)
		switch {
		case len(found) == 0:
			if !spec.Optional && haveResult {
				has := "no sections"
				switch n := len(titles); {
				case n > maxTitles:
					has = fmt.Sprintf("only %s and %d more", strings.Join(quoted(titles[:maxTitles]), ", "), n-maxTitles)
				case n > 0:
					has = "only " + quoteList(titles)
				}
				ck.violate(VSectionMissing, subject, req, "no such section; result.md has "+has)
			}
		case !nonEmpty:
			ck.violate(VSectionEmpty, subject, req, fmt.Sprintf("%q at line %d with no text", found[0].Title, found[0].Line))
		case spec.MaxBytes > 0 && int64(sc.Bytes) > spec.MaxBytes:
			ck.violate(VSectionTooLarge, subject, fmt.Sprintf("at most %d bytes of text (max_bytes)", spec.MaxBytes),
				fmt.Sprintf("%d bytes", sc.Bytes))
		}
		sc.OK = nonEmpty && (spec.MaxBytes == 0 || int64(sc.Bytes) <= spec.MaxBytes)
		if len(found) == 0 && spec.Optional {
			sc.OK = true
		}
		ck.rep.Sections = append(ck.rep.Sections, sc)
	}
}

func sectionNonEmpty(secs []Section) bool {
	for _, s := range secs {
		if strings.TrimSpace(s.Body) != "" {
			return true
		}
	}
	return false
}

func describeSection(s SectionSpec) string {
	names := quoteList(append([]string{s.Name}, s.Aliases...))
	return fmt.Sprintf("a non-empty section %s (a \"# %s\" heading or a \"%s:\" line)", strings.Replace(names, " and ", " or ", 1), s.Name, s.Name)
}

// readRefs reads and parses refs.jsonl; problems with the file itself are
// recorded as violations by refViolations.
func (ck *checker) readRefs() (refs []Ref, lines []int, bad []refLineError, err error) {
	e, err := ck.d.look(FileRefs)
	if err != nil {
		return nil, nil, nil, err
	}
	switch {
	case e.missing != "":
		return nil, nil, nil, nil // no refs
	case e.problem != "":
		ck.refsCode, ck.refsFound = VRefsNotFile, strings.TrimPrefix(e.problem, FileRefs+" is ")
		return nil, nil, nil, nil
	}
	b, more, err := ck.d.read(FileRefs, e, MaxRefsFile)
	if err != nil {
		ck.refsCode, ck.refsFound = VRefsNotFile, err.Error()
		return nil, nil, nil, nil
	}
	if more {
		ck.refsCode, ck.refsFound = VRefsTooLarge, fmt.Sprintf("%d bytes", e.info.Size())
		return nil, nil, nil, nil
	}
	refs, lines, bad = parseRefs(b)
	return refs, lines, bad, nil
}

func (ck *checker) refViolations(bad []refLineError, n int) {
	switch ck.refsCode {
	case VRefsNotFile:
		ck.violate(VRefsNotFile, FileRefs, "a regular file, or none", ck.refsFound)
	case VRefsTooLarge:
		ck.violate(VRefsTooLarge, FileRefs, fmt.Sprintf("at most %d bytes", MaxRefsFile), ck.refsFound)
	}
	for i, b := range bad {
		if i == maxLineReports {
			ck.violate(VRefsMalformed, FileRefs, "one JSON object a line", fmt.Sprintf("%d more malformed lines", len(bad)-i))
			break
		}
		ck.violate(VRefsMalformed, fmt.Sprintf("refs.jsonl line %d", b.line), `a JSON object {"path", "hash"?, "kind"?, "summary"?}`, kinMessage(b.err))
	}
	if int64(n) > ck.c.Limits.Refs {
		ck.violate(VRefsTooMany, FileRefs, fmt.Sprintf("at most %d refs (limits.refs)", ck.c.Limits.Refs),
			fmt.Sprintf("%d refs; only the first %d were checked", n, ck.c.Limits.Refs))
	}
}

func (ck *checker) artifacts(refs []Ref) error {
	specs := map[string]ArtifactSpec{}
	for _, a := range ck.c.Artifacts {
		specs[a.Path] = a
	}
	refKind := map[string]string{}
	for _, r := range refs {
		if !strings.HasPrefix(r.Path, "/") && !hasDotDot(r.Path) && r.Kind != "" {
			if p := path.Clean(r.Path); refKind[p] == "" {
				refKind[p] = r.Kind
			}
		}
	}
	reported := map[string]bool{}
	regular := map[string]bool{}
	lim := ck.c.Limits
	fi, err := ck.d.root.Lstat(ArtifactDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		ck.violate(VArtifactSymlink, ArtifactDir+"/", "a directory of regular files", "a symlink")
		reported[ArtifactDir] = true
	case !fi.IsDir():
		ck.violate(VArtifactNotFile, ArtifactDir+"/", "a directory of regular files", describeMode(fi.Mode()))
		reported[ArtifactDir] = true
	default:
		var count, total int64
		overTotal := false
		err := fs.WalkDir(ck.d.root.FS(), ArtifactDir, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				ck.violate(VArtifactUnreadable, p, "a readable directory", err.Error())
				reported[p] = true
				return nil
			}
			if de.IsDir() {
				return nil
			}
			spec, listed := specs[p]
			required := "a regular file"
			if listed {
				required = describeArtifact(spec)
			}
			if de.Type()&fs.ModeSymlink != 0 {
				ck.violate(VArtifactSymlink, p, required+" (artifacts are never symlinks)", "a symlink")
				reported[p] = true
				return nil
			}
			info, err := de.Info()
			if err != nil {
				ck.violate(VArtifactUnreadable, p, required, err.Error())
				reported[p] = true
				return nil
			}
			if !info.Mode().IsRegular() {
				ck.violate(VArtifactNotFile, p, required, describeMode(info.Mode()))
				reported[p] = true
				return nil
			}
			count++
			if count > lim.Artifacts {
				ck.violate(VArtifactsTooMany, ArtifactDir+"/", fmt.Sprintf("at most %d files (limits.artifacts)", lim.Artifacts),
					fmt.Sprintf("more than %d; the rest were not checked", lim.Artifacts))
				return fs.SkipAll
			}
			regular[p] = true
			af := ArtifactFile{Path: p, Size: info.Size(), Kind: refKind[p], Listed: listed}
			if listed && spec.Kind != "" {
				af.Kind = spec.Kind
			}
			if !listed && ck.c.UnlistedArtifacts == UnlistedReject {
				ck.violate(VArtifactUnlisted, p, "only the artifacts the contract lists (unlisted_artifacts: reject)", "an unlisted file")
			}
			if listed && spec.MaxBytes > 0 && info.Size() > spec.MaxBytes {
				ck.violate(VArtifactTooLarge, p, fmt.Sprintf("at most %d bytes (max_bytes)", spec.MaxBytes), fmt.Sprintf("%d bytes", info.Size()))
			}
			if listed && spec.Kind != "" && refKind[p] != "" && refKind[p] != spec.Kind {
				ck.violate(VArtifactKindMismatch, p, fmt.Sprintf("kind %q", spec.Kind), fmt.Sprintf("kind %q in refs.jsonl", refKind[p]))
			}
			total += info.Size()
			if total > lim.ArtifactBytes {
				if !overTotal {
					ck.violate(VArtifactsTooLarge, ArtifactDir+"/", fmt.Sprintf("at most %d bytes in all (limits.artifact_bytes)", lim.ArtifactBytes),
						fmt.Sprintf("more than that by %s; files past the limit were not hashed", p))
					overTotal = true
				}
			} else if e, err := ck.d.look(p); err == nil && e.ok() {
				if h, err := ck.d.hash(p, e); err == nil {
					af.Hash = h
					ck.hashes[p] = h
				} else {
					ck.violate(VArtifactUnreadable, p, required, err.Error())
				}
			}
			ck.rep.Artifacts = append(ck.rep.Artifacts, af)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, a := range ck.c.Artifacts {
		if regular[a.Path] {
			continue
		}
		e, err := ck.d.look(a.Path)
		if err != nil {
			return err
		}
		switch {
		case e.ok(): // there, but past limits.artifacts: already reported
		case e.missing != "":
			if !a.Optional {
				found := "no such file"
				if e.missing != a.Path {
					found = "no " + e.missing
				}
				ck.violate(VArtifactMissing, a.Path, describeArtifact(a), found)
			}
		case reported[a.Path], reported[ArtifactDir] && a.Optional:
		default:
			code := VArtifactNotFile
			if strings.HasSuffix(e.problem, " is a symlink") {
				code = VArtifactSymlink
			}
			ck.violate(code, a.Path, describeArtifact(a), e.problem)
		}
	}
	return nil
}

func describeArtifact(a ArtifactSpec) string {
	s := "a regular file"
	if a.Kind != "" {
		s += fmt.Sprintf(" of kind %q", a.Kind)
	}
	if a.Optional {
		s += " (optional)"
	}
	return s
}

func (ck *checker) ref(r Ref, line int) error {
	rc := RefCheck{Line: line, Ref: r}
	subject := fmt.Sprintf("refs.jsonl line %d (%s)", line, clip(r.Path, 200))
	defer func() { ck.rep.Refs = append(ck.rep.Refs, rc) }()
	if hasDotDot(r.Path) {
		rc.State, rc.Note = RefInvalid, `the path has a ".." element`
		ck.violate(VRefPathInvalid, subject, `a path without ".."`, r.Path)
		return nil
	}
	compare := func(h string) {
		rc.Computed = h
		switch {
		case r.Hash == "":
			rc.State = RefHashed
		case r.Hash == h:
			rc.State = RefVerified
		default:
			rc.State = RefMismatch
			ck.violate(VRefHashMismatch, subject, "the hash the child claimed, "+r.Hash, "the file's sha256 is "+h)
		}
	}
	if filepath.IsAbs(r.Path) {
		p := filepath.Clean(r.Path)
		if ck.opts.AbsRoots != nil && !under(p, ck.opts.AbsRoots) {
			rc.State, rc.Note = RefUnverified, "outside the child's visible paths; not read"
			return nil
		}
		f, fi, err := openRegular(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			rc.State, rc.Note = RefUnverified, "not found; not verified"
			return nil
		case err != nil && r.Hash != "" && isNotRegular(p):
			rc.State, rc.Note = RefInvalid, kinMessage(err)
			ck.violate(VRefNotFile, subject, "a regular file, since a hash is claimed", kinMessage(err))
			return nil
		case err != nil:
			rc.State, rc.Note = RefUnverified, "not read: "+kinMessage(err)
			return nil
		}
		defer f.Close()
		h, err := hashFile(f, fi)
		if err != nil {
			rc.State, rc.Note = RefUnverified, "not hashed: "+kinMessage(err)
			return nil
		}
		compare(h)
		return nil
	}
	rel := path.Clean(r.Path)
	if h, ok := ck.hashes[rel]; ok {
		compare(h)
		return nil
	}
	e, err := ck.d.look(rel)
	if err != nil {
		return err
	}
	switch {
	case rel == ".":
		rc.State, rc.Note = RefInvalid, "names the result directory itself"
		ck.violate(VRefNotFile, subject, "a file inside the result directory", "the result directory itself")
	case e.missing != "":
		rc.State, rc.Note = RefInvalid, "no such file in the result"
		ck.violate(VRefMissing, subject, "a file the child produced, inside the result directory", "no "+e.missing)
	case e.problem != "":
		rc.State, rc.Note = RefInvalid, e.problem
		ck.violate(VRefNotFile, subject, "a regular file inside the result directory", e.problem)
	default:
		h, err := ck.d.hash(rel, e)
		if err != nil {
			rc.State, rc.Note = RefInvalid, "not hashed: "+kinMessage(err)
			ck.violate(VRefUnreadable, subject, "a readable regular file", kinMessage(err))
			return nil
		}
		ck.hashes[rel] = h
		compare(h)
	}
	return nil
}

// isNotRegular: the path exists and is a directory or a special file.
func isNotRegular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.Mode().IsRegular()
}

// under reports whether the clean absolute path p is one of roots or inside
// one. Roots are cleaned; a root with a ".." element matches nothing.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if !filepath.IsAbs(r) || hasDotDot(filepath.ToSlash(r)) {
			continue
		}
		r = filepath.Clean(r)
		if p == r || strings.HasPrefix(p, strings.TrimSuffix(r, "/")+"/") {
			return true
		}
	}
	return false
}

// maxTitles bounds the section titles a message lists.
const maxTitles = 20

func quoted(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return q
}

func quoteList(names []string) string {
	q := quoted(names)
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// trimPartialRune drops an incomplete UTF-8 sequence that a size limit cut.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}
