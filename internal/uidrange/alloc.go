package uidrange

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Where ranges are recorded.
const (
	// DefaultDir is the directory every kin daemon of a host agrees on.
	DefaultDir = "/var/lib/kin"
	// HostFileName, in the host directory, lists every daemon's range,
	// "START:COUNT HOME" a line.
	HostFileName = "uid-ranges"
	// HomeFileName, in a home, holds that home's range, "START:COUNT".
	HomeFileName = "uid-range"
	lockFileName = HostFileName + ".lock"
)

// Allocator hands out ranges from a host directory.
type Allocator struct {
	// Dir holds the allocation file and its lock; "" is DefaultDir.
	Dir string
	// Host are the files of users and groups; the zero value is
	// DefaultHostFiles.
	Host HostFiles
}

// Allocation is what Allocate settled.
type Allocation struct {
	Range Range
	// New says the range was allocated now (not read from the home).
	New bool
	// Reclaimed are the stale entries dropped: homes gone, or no longer
	// recording that range.
	Reclaimed []Entry
}

// Entry is one line of the allocation file.
type Entry struct {
	Range
	Home string
}

// Allocate settles home's range under the host lock. want, when not nil,
// is the range asked for (kin serve --uid-range); otherwise the home keeps
// the range it recorded, or gets the lowest free range of DefaultCount uids
// from DefaultStart. The range is refused when it overlaps another
// daemon's recorded range or ids the host files give out, naming both. It
// is then recorded in the home (HomeFileName) and in the allocation file.
func (a Allocator) Allocate(home string, want *Range) (Allocation, error) {
	dir := a.Dir
	if dir == "" {
		dir = DefaultDir
	}
	hostFiles := a.Host
	if hostFiles == (HostFiles{}) {
		hostFiles = DefaultHostFiles()
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return Allocation{}, err
	}
	if strings.ContainsAny(home, "\n\x00") {
		return Allocation{}, fmt.Errorf("uid range: home %q holds a newline or NUL, which the allocation file cannot record", home)
	}
	if want != nil {
		if err := want.Validate(); err != nil {
			return Allocation{}, err
		}
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Allocation{}, err
	}
	defer unlock()

	hostPath := filepath.Join(dir, HostFileName)
	entries, err := readHostFile(hostPath)
	if err != nil {
		return Allocation{}, err
	}
	var out Allocation
	var others []Entry
	for _, e := range entries {
		switch {
		case sameHome(e.Home, home):
		case stale(e):
			out.Reclaimed = append(out.Reclaimed, e)
		default:
			others = append(others, e)
		}
	}
	homePath := filepath.Join(home, HomeFileName)
	recorded, hasRecord, err := ReadHome(home)
	if err != nil {
		return Allocation{}, err
	}
	taken, err := hostTaken(hostFiles)
	if err != nil {
		return Allocation{}, err
	}
	var r Range
	switch {
	case want != nil && hasRecord && *want != recorded:
		return Allocation{}, fmt.Errorf("uid range %s: home %s already runs its agents in uid range %s (recorded in %s; their files are owned by those uids): leave --uid-range out, or give %s; a different range needs a new home", *want, home, recorded, homePath, recorded)
	case want != nil:
		r = *want
	case hasRecord:
		r = recorded
	default:
		if r, err = free(others, taken); err != nil {
			return Allocation{}, err
		}
		out.New = true
	}
	for _, e := range others {
		if r.Overlaps(e.Range) {
			return Allocation{}, fmt.Errorf("uid range %s (uids %s) of home %s overlaps uid range %s (uids %s) of the kin daemon with home %s, recorded in %s: choose another range with --uid-range, or leave it out to have a free one allocated", r, r.Span(), home, e.Range, e.Span(), e.Home, hostPath)
		}
	}
	for _, t := range taken {
		if r.Overlaps(t.Range) {
			return Allocation{}, fmt.Errorf("uid range %s (uids %s) of home %s holds %s: agents would share that user's or group's files and processes; choose another range with --uid-range (or remove that user)", r, r.Span(), home, t.What)
		}
	}
	if !hasRecord || recorded != r {
		if err := writeFileAtomic(homePath, []byte(r.String()+"\n"), 0o644); err != nil {
			return Allocation{}, fmt.Errorf("uid range: record it in the home: %w", err)
		}
	}
	next := append(others, Entry{r, home})
	if !slices.Equal(next, entries) {
		if err := writeFileAtomic(hostPath, formatHostFile(next), 0o644); err != nil {
			return Allocation{}, fmt.Errorf("uid range: record it in %s: %w", hostPath, err)
		}
	}
	out.Range = r
	return out, nil
}

// ReadHome reads the range recorded in home, if any.
func ReadHome(home string) (Range, bool, error) {
	p := filepath.Join(home, HomeFileName)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Range{}, false, nil
	}
	if err != nil {
		return Range{}, false, fmt.Errorf("uid range: %w", err)
	}
	r, err := Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return Range{}, false, fmt.Errorf("%s: %w (fix or remove the file while no agent of this home runs)", p, err)
	}
	return r, true, nil
}

// free is the lowest range of DefaultCount uids from DefaultStart that
// overlaps nothing recorded or taken.
func free(others []Entry, taken []Taken) (Range, error) {
	busy := make([]Range, 0, len(others)+len(taken))
	for _, e := range others {
		busy = append(busy, e.Range)
	}
	for _, t := range taken {
		busy = append(busy, t.Range)
	}
	start := uint64(DefaultStart)
	for {
		if start+DefaultCount > autoEnd {
			return Range{}, fmt.Errorf("uid range: no %d free uids left between %d and %d for a new daemon; give one with --uid-range START:COUNT", DefaultCount, DefaultStart, uint64(autoEnd))
		}
		cand := Range{uint32(start), DefaultCount}
		moved := false
		for _, b := range busy {
			if cand.Overlaps(b) && b.End() > start {
				start, moved = b.End(), true
			}
		}
		if !moved {
			return cand, nil
		}
	}
}

// sameHome says whether two paths name one home (also through links).
func sameHome(a, b string) bool {
	if a == b {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// stale says whether e's home no longer holds its range: the home is gone
// or records none or another. Those uids are free again; a home that could
// not be read is kept (not proven gone).
func stale(e Entry) bool {
	r, ok, err := ReadHome(e.Home)
	if err != nil {
		return false
	}
	return !ok || r != e.Range
}

// lockDir takes the host directory's lock, making the directory first.
// A directory others may write is refused: whoever writes it decides
// which uids agents run as.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("uid range: host directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("uid range: host directory: %w", err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("uid range: host directory %s is writable by group or others (mode %v); make it 0755 and owned by root", dir, fi.Mode().Perm())
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("uid range: lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("uid range: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing drops the lock
}

// readHostFile reads the allocation file; a missing one is empty.
func readHostFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("uid range: %w", err)
	}
	defer f.Close()
	return parseHostFile(f, path)
}

// parseHostFile reads "START:COUNT HOME" lines; # starts a comment.
func parseHostFile(r io.Reader, path string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rs, home, ok := strings.Cut(line, " ")
		if !ok || !filepath.IsAbs(home) {
			return nil, fmt.Errorf("%s:%d: %q is not \"START:COUNT HOME\" with an absolute HOME; fix or remove the line", path, n, line)
		}
		rg, err := Parse(rs)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w; fix or remove the line", path, n, err)
		}
		out = append(out, Entry{rg, home})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("uid range: read %s: %w", path, err)
	}
	return out, nil
}

const hostFileHeader = "# kin: the agent uid range of each kin daemon of this host, START:COUNT HOME a line.\n" +
	"# Kept by kin serve under uid-ranges.lock; an entry whose home no longer records its range is reclaimed.\n"

func formatHostFile(es []Entry) []byte {
	var b bytes.Buffer
	b.WriteString(hostFileHeader)
	for _, e := range es {
		fmt.Fprintf(&b, "%s %s\n", e.Range, e.Home)
	}
	return b.Bytes()
}

// writeFileAtomic replaces path with data, so that a crash leaves the old
// file or the new one, never half of one.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil { // whatever the umask is
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
