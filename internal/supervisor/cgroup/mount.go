package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoCgroup2 means /proc/self/mountinfo lists no cgroup2 file system.
var ErrNoCgroup2 = errors.New("no cgroup2 mount in /proc/self/mountinfo")

// Mount is one cgroup2 mount.
type Mount struct {
	// Dir is where the hierarchy is mounted, e.g. /sys/fs/cgroup/unified.
	Dir string
	// Root is the hierarchy path shown at Dir: "/" unless the mount is a
	// bind mount of a subtree (some containers).
	Root string
	// Writable is false when the mount or its super block is read-only.
	Writable bool
}

// FindMount returns the cgroup2 mount to use: the first writable one whose
// Root contains this process's cgroup, else the first writable one, else the
// first one (read-only).
func FindMount() (Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return Mount{}, err
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return Mount{}, err
	}
	self, _ := PathOfPID(0)
	return pickMount(mounts, self)
}

func pickMount(mounts []Mount, self string) (Mount, error) {
	if len(mounts) == 0 {
		return Mount{}, ErrNoCgroup2
	}
	for _, m := range mounts {
		if m.Writable && self != "" && within(self, m.Root) {
			return m, nil
		}
	}
	for _, m := range mounts {
		if m.Writable {
			return m, nil
		}
	}
	return mounts[0], nil
}

// parseMountinfo returns the cgroup2 mounts listed in a mountinfo file
// (proc(5)): "id parent maj:min root mountpoint options [optional...] -
// fstype source superoptions".
func parseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		writable := !hasOpt(fields[5], "ro")
		if sep+3 < len(fields) && hasOpt(fields[sep+3], "ro") {
			writable = false
		}
		out = append(out, Mount{
			Dir:      unescapeMountinfo(fields[4]),
			Root:     unescapeMountinfo(fields[3]),
			Writable: writable,
		})
	}
	return out, sc.Err()
}

func hasOpt(opts, opt string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space,
// \011, \012, \134) in mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// PathOfPID returns the cgroup v2 path (relative to the hierarchy root as
// seen from this cgroup namespace) of process pid, or of this process when
// pid is 0. A group that was removed while the process (a zombie) still
// referred to it is reported with its old path.
func PathOfPID(pid int) (string, error) {
	name := "/proc/self/cgroup"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/cgroup"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	p, ok := parseProcCgroup(string(b))
	if !ok {
		return "", fmt.Errorf("%s: no cgroup v2 (0::) line", name)
	}
	return p, nil
}

func parseProcCgroup(s string) (string, bool) {
	for _, line := range strings.Split(s, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return strings.TrimSuffix(p, " (deleted)"), true
		}
	}
	return "", false
}

// DirOf maps a hierarchy path (from /proc/<pid>/cgroup) to its directory
// under the mount, or reports false when the path is not visible there.
func (m Mount) DirOf(path string) (string, bool) {
	if !within(path, m.Root) {
		return "", false
	}
	rel := strings.TrimPrefix(path, m.Root)
	return filepath.Join(m.Dir, rel), true
}

// DirOfPID is the directory of process pid's cgroup (0: this process).
func (m Mount) DirOfPID(pid int) (string, error) {
	p, err := PathOfPID(pid)
	if err != nil {
		return "", err
	}
	d, ok := m.DirOf(p)
	if !ok {
		return "", fmt.Errorf("cgroup %s of pid %d is outside mount %s (root %s)", p, pid, m.Dir, m.Root)
	}
	return d, nil
}

// Within reports whether path is dir or below it (both clean and absolute).
func Within(path, dir string) bool { return within(path, dir) }

func within(path, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}
