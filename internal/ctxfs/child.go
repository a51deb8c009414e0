package ctxfs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/kin"
)

// ChildStatus is the status file of a parent's context/child/<child>/: how
// the handoff went.
type ChildStatus string

const (
	ChildRunning          ChildStatus = "running"           // handed off, not ended
	ChildCompleted        ChildStatus = "completed"         // ended, result meets its contract, refs verified
	ChildContractViolated ChildStatus = "contract_violated" // ended, result kept but fails its contract or its refs
	ChildFailed           ChildStatus = "failed"            // ended without a usable result
	ChildCancelled        ChildStatus = "cancelled"         // its runtime was cancelled (e.g. parent death)
)

// Valid reports whether s is one of the five statuses.
func (s ChildStatus) Valid() bool {
	switch s {
	case ChildRunning, ChildCompleted, ChildContractViolated, ChildFailed, ChildCancelled:
		return true
	}
	return false
}

// ChildParams describes a child in its parent's session.
type ChildParams struct {
	Parent       Session // the parent's session; its Owner owns the child directory
	Child        string  // the child's name
	ChildID      kin.AgentID
	ChildSession string      // the child's session id
	Handoff      []byte      // handoff.md
	Status       ChildStatus // "" is running
}

// CreateChildDir makes context/child/<child>/ in the parent's session,
// owned by the parent (0700, files 0600): agent (the child's id), session
// (its session id), status, handoff.md and an empty artifact/. result.md and
// refs.jsonl appear when CopyResult copies them in. Like a session it
// appears complete or not at all, and an existing one is not replaced (the
// error wraps fs.ErrExist).
func (f *FS) CreateChildDir(p ChildParams) error {
	if err := p.Parent.validate(); err != nil {
		return err
	}
	if err := checkName("child name", p.Child); err != nil {
		return err
	}
	if err := checkName("child session", p.ChildSession); err != nil {
		return err
	}
	if p.ChildID <= 0 {
		return fmt.Errorf("ctxfs: child %q has no agent id", p.Child)
	}
	if p.Status == "" {
		p.Status = ChildRunning
	}
	if !p.Status.Valid() {
		return fmt.Errorf("ctxfs: child status %q", p.Status)
	}
	dir := f.ChildDir(p.Parent.UID, p.Parent.Agent, p.Parent.ID, p.Child)
	sfd, err := f.openSession(p.Parent)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	o := p.Parent.Owner
	children, err := f.mkdirsAt(sfd, []string{dirContext, dirChild}, o, ModeAgentDir)
	if err != nil {
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	defer unix.Close(children)
	// A folder per child: spread over the file system (SpreadSubdirs).
	// Best effort: without it only the allocation is slower.
	SpreadSubdirs(children)

	if exists(children, p.Child) { // (the rename below decides; this spares building a stage for nothing)
		return fmt.Errorf("ctxfs: %s: child directory exists: %w", dir, fs.ErrExist)
	}
	stage := f.transient(p.Child, stageTag)
	build := func() error {
		fd, _, err := f.mkdirAt(children, stage, o, ModeAgentDir)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, file := range []File{
			{FileChildAgent, line(p.ChildID.String())},
			{FileChildSession, line(p.ChildSession)},
			{FileChildStatus, line(string(p.Status))},
			{FileHandoff, p.Handoff},
		} {
			if err := f.createAt(fd, file.Name, file.Data, o, ModeAgentFile); err != nil {
				return err
			}
		}
		if err := f.mkdirWith(fd, dirArtifact, o, nil); err != nil {
			return err
		}
		return f.syncDir(fd)
	}
	err = build()
	if err == nil {
		err = unix.Renameat2(children, stage, children, p.Child, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		removeAllAt(children, stage, 0)
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("child directory exists: %w", fs.ErrExist)
		}
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	f.dropSpares(childSpare(p.Parent, p.Child))
	return f.syncDir(children)
}

// SetChildStatus writes the status file of the parent's child directory.
func (f *FS) SetChildStatus(parent Session, child string, st ChildStatus) error {
	if !st.Valid() {
		return fmt.Errorf("ctxfs: child status %q", st)
	}
	fd, err := f.openChild(parent, child)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	dir := f.ChildDir(parent.UID, parent.Agent, parent.ID, child)
	if err := f.rewriteAt(fd, FileChildStatus, childSpare(parent, child), line(string(st)), parent.Owner, ModeAgentFile); err != nil {
		return fmt.Errorf("ctxfs: %s: %w", dir, err)
	}
	return f.syncDir(fd)
}

// ChildStatusOf reads the status file of the parent's child directory.
func (f *FS) ChildStatusOf(parent Session, child string) (ChildStatus, error) {
	fd, err := f.openChild(parent, child)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	b, err := readAt(fd, FileChildStatus, 1024)
	if err != nil {
		return "", fmt.Errorf("ctxfs: %s: %w", f.ChildDir(parent.UID, parent.Agent, parent.ID, child), err)
	}
	return ChildStatus(strings.TrimSuffix(string(b), "\n")), nil
}

func (f *FS) openChild(parent Session, child string) (int, error) {
	if err := checkName("child name", child); err != nil {
		return -1, err
	}
	sfd, err := f.openSession(parent)
	if err != nil {
		return -1, err
	}
	defer unix.Close(sfd)
	fd, err := walk(sfd, []string{dirContext, dirChild, child})
	if err != nil {
		return -1, fmt.Errorf("ctxfs: %s: %w", f.ChildDir(parent.UID, parent.Agent, parent.ID, child), err)
	}
	return fd, nil
}

// Manifest says what CopyResult copied.
type Manifest struct {
	Result bool         // result.md was there
	Refs   bool         // refs.jsonl was there
	Files  []CopiedFile // every file copied, by path relative to the child directory, sorted
}

// CopiedFile is one copied file. SHA256 is of the bytes written to the copy
// (not of the source, which the child could still change), in the form
// refs.jsonl uses: "sha256:<hex>".
type CopiedFile struct {
	Path   string
	Size   int64
	SHA256 string
}

// Lookup returns the entry for rel (e.g. "artifact/patch.diff").
func (m *Manifest) Lookup(rel string) (CopiedFile, bool) {
	i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Path >= rel })
	if i < len(m.Files) && m.Files[i].Path == rel {
		return m.Files[i], true
	}
	return CopiedFile{}, false
}

// CopyResult copies a child's result channels from fromDir, the child's
// output directory (Layout.OutputDir), into toChildDir, the parent's
// context/child/<child>/ (Layout.ChildDir): result.md, refs.jsonl and the
// tree under artifact/. Both must be beneath the ctx root.
//
// The child owns fromDir, so everything in it is treated as hostile: links
// anywhere, devices, FIFOs, sockets and entries not owned by fromDir's owner
// are refused (the copy fails and the parent's directory is unchanged), and
// the copy is bounded by Options' limits. A missing result.md or refs.jsonl
// is not an error: the Manifest says what was there, and judging the result
// against its contract is the caller's.
//
// The copies belong to toChildDir's owner (files 0600, directories 0700).
// They are staged in toChildDir under transient names and then swapped
// into place one entry at a time, each atomically, artifact/ first and
// result.md last, replacing an earlier copy (an entry absent from fromDir is
// removed). An empty artifact/ replacing an empty one is left as it is.
func (f *FS) CopyResult(fromDir, toChildDir string) (Manifest, error) {
	src, err := f.walkPath(fromDir)
	if err != nil {
		return Manifest{}, err
	}
	defer unix.Close(src)
	dst, err := f.walkPath(toChildDir)
	if err != nil {
		return Manifest{}, err
	}
	defer unix.Close(dst)
	var sst, dst0 unix.Stat_t
	if err := unix.Fstat(src, &sst); err != nil {
		return Manifest{}, err
	}
	if err := unix.Fstat(dst, &dst0); err != nil {
		return Manifest{}, err
	}
	c := &copier{
		f:       f,
		srcUID:  sst.Uid,
		o:       Owner{UID: int(dst0.Uid), GID: int(dst0.Gid)},
		maxB:    f.maxBytes,
		maxN:    f.maxFiles,
		hashBuf: make([]byte, 64<<10),
	}
	staged := map[string]string{} // entry -> its staged copy's name in dst
	m, err := c.stage(src, dst, staged)
	if err == nil {
		err = c.install(dst, staged, m)
	}
	for _, name := range staged { // what was replaced, or the stages after an error
		removeAllAt(dst, name, 0)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("ctxfs: copy result %s to %s: %w", fromDir, toChildDir, err)
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	return m, nil
}

type copier struct {
	f       *FS
	srcUID  uint32
	o       Owner
	maxB    int64
	maxN    int
	bytes   int64
	files   int
	hashBuf []byte
}

// stage copies src's result channels into dst, each under a transient name
// that staged records. An empty artifact/ in src where dst has one as
// CreateChildDir made it (empty, the owner's, 0700) is not staged: that one
// stays (a directory neither made nor freed).
func (c *copier) stage(src, dst int, staged map[string]string) (Manifest, error) {
	var m Manifest
	for _, name := range []string{FileResult, FileRefs} {
		tmp := c.f.transient(name, stageTag)
		found, err := c.copyFile(src, name, dst, tmp, name, &m)
		if found || err != nil {
			staged[name] = tmp // also after an error: a partial copy is removed
		}
		if err != nil {
			return m, err
		}
		if name == FileResult {
			m.Result = found
		} else {
			m.Refs = found
		}
	}
	kind, err := c.lstat(src, dirArtifact)
	missing := errors.Is(err, fs.ErrNotExist)
	switch {
	case missing:
	case err != nil:
		return m, err
	case kind != unix.S_IFDIR:
		return m, fmt.Errorf("%s: %w", dirArtifact, ErrNotRegular)
	}
	if (missing || c.emptyDir(src, dirArtifact, c.srcUID, 0)) && c.emptyDir(dst, dirArtifact, uint32(c.o.UID), ModeAgentDir) {
		return m, nil
	}
	tmp := c.f.transient(dirArtifact, stageTag)
	staged[dirArtifact] = tmp
	if missing {
		return m, c.f.mkdirWith(dst, tmp, c.o, nil)
	}
	return m, c.copyDir(src, dirArtifact, dst, tmp, dirArtifact+"/", 1, &m)
}

// emptyDir reports whether name in dirfd is a directory (not a link) of
// uid without entries, with mode when mode is not 0.
func (c *copier) emptyDir(dirfd int, name string, uid uint32, mode fs.FileMode) bool {
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Uid != uid || (mode != 0 && fs.FileMode(st.Mode&0o7777) != mode) {
		return false
	}
	names, err := listAt(fd)
	return err == nil && len(names) == 0
}

// install swaps the staged entries into dst: artifact/, refs.jsonl, then
// result.md, so that a reader who sees the new result.md sees its refs and
// artifacts. A replaced entry is left under its stage's name; an entry
// absent from the child's output is removed (an artifact/ not staged stays).
func (c *copier) install(dst int, staged map[string]string, m Manifest) error {
	for _, e := range []struct {
		name    string
		present bool
	}{{dirArtifact, true}, {FileRefs, m.Refs}, {FileResult, m.Result}} {
		tmp, ok := staged[e.name]
		var err error
		switch {
		case ok && e.present:
			err = exchangeAt(dst, tmp, e.name)
		case e.present: // artifact/, kept as it is
		default:
			err = removeAllAt(dst, e.name, 0)
		}
		if err != nil {
			return err
		}
	}
	return c.f.syncDir(dst)
}

// lstat returns the file type of name in dirfd, checking its owner.
func (c *copier) lstat(dirfd int, name string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return 0, fmt.Errorf("%s: %w", name, ErrSymlink)
	}
	if st.Uid != c.srcUID {
		return 0, fmt.Errorf("%s: uid %d: %w", name, st.Uid, ErrForeign)
	}
	return st.Mode & unix.S_IFMT, nil
}

// copyFile copies the regular file name in src to the new file to in dst,
// reporting false if there is no such file. rel names it in errors and in
// the manifest.
func (c *copier) copyFile(src int, name string, dst int, to, rel string, m *Manifest) (bool, error) {
	in, err := unix.Openat(src, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return false, fmt.Errorf("%s: %w", rel, ErrSymlink)
	}
	if errors.Is(err, unix.ENXIO) { // a socket
		return false, fmt.Errorf("%s: %w", rel, ErrNotRegular)
	}
	if err != nil {
		return false, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	inf := os.NewFile(uintptr(in), name)
	defer inf.Close()
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%s: %w", rel, ErrNotRegular)
	}
	if st.Uid != c.srcUID {
		return false, fmt.Errorf("%s: uid %d: %w", rel, st.Uid, ErrForeign)
	}
	c.files++
	if c.files > c.maxN {
		return false, fmt.Errorf("more than %d files: %w", c.maxN, ErrTooLarge)
	}
	left := c.maxB - c.bytes
	if st.Size > left {
		return false, fmt.Errorf("%s: more than %d bytes in all: %w", rel, c.maxB, ErrTooLarge)
	}
	out, err := unix.Openat(dst, to, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, &fs.PathError{Op: "create", Path: rel, Err: err}
	}
	outf := os.NewFile(uintptr(out), name)
	defer outf.Close()
	if err := c.f.fixOwner(out, c.o, ModeAgentFile); err != nil {
		return false, err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(outf, h), io.LimitReader(inf, left+1), c.hashBuf)
	if err != nil {
		return false, &fs.PathError{Op: "copy", Path: rel, Err: err}
	}
	if n > left { // it grew while being copied
		return false, fmt.Errorf("%s: more than %d bytes in all: %w", rel, c.maxB, ErrTooLarge)
	}
	c.bytes += n
	if err := c.f.syncFile(out); err != nil {
		return false, err
	}
	m.Files = append(m.Files, CopiedFile{Path: rel, Size: n, SHA256: hashString(h)})
	return true, nil
}

func hashString(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// copyDir copies the directory name in src (already checked to be a
// directory owned by the child) to the new directory to in dst.
func (c *copier) copyDir(src int, name string, dst int, to, rel string, depth int, m *Manifest) error {
	if depth > maxResultDepth {
		return fmt.Errorf("%s: nested deeper than %d: %w", rel, maxResultDepth, ErrTooLarge)
	}
	in, err := openDirAt(src, name)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	if st.Uid != c.srcUID { // replaced between the lstat and the open
		return fmt.Errorf("%s: uid %d: %w", rel, st.Uid, ErrForeign)
	}
	out, _, err := c.f.mkdirAt(dst, to, c.o, ModeAgentDir)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	names, err := listAt(in)
	if err != nil {
		return err
	}
	for _, n := range names {
		kind, err := c.lstat(in, n)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		switch kind {
		case unix.S_IFDIR:
			err = c.copyDir(in, n, out, n, rel+n+"/", depth+1, m)
		case unix.S_IFREG:
			_, err = c.copyFile(in, n, out, n, rel+n, m)
		default:
			err = fmt.Errorf("%s%s: %w", rel, n, ErrNotRegular)
		}
		if err != nil {
			return err
		}
	}
	return c.f.syncDir(out)
}
