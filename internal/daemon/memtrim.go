package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// startupPages is what unmapStartupPages did, once per process: a process
// may start several daemons (the tests do), and only the first start
// follows the program's initialisation.
var startupPages struct {
	once  sync.Once
	bytes int64
	err   error
}

// unmapStartupPages unmaps the kin binary's code and read-only data once
// the daemon has started (issue 22, memory). The kernel maps a program's
// file pages 64 KiB around each page it faults in when they are cached
// (fault-around), and the binary always is: the inits of some 400
// packages, the store's migrations and the start's own code touch most
// 64 KiB windows of the 37 MiB of code, read-only data and function tables
// once, and they stayed mapped (about 30 MiB of a daemon's RSS before any
// agent). Unmapping them (MADV_DONTNEED on the read-only private mappings
// of /proc/self/exe) keeps them in the page cache: what the daemon runs
// afterwards maps back with a minor fault, no disk read, and only the
// windows it uses. What this saves is resident mapped memory (RSS, PSS);
// the cached pages are the kernel's to keep or reclaim, unmapped pages
// first. The shared libraries a cgo-linked kin loads (libc and ld.so,
// for net's and os/user's lookups and the runtime's threads: about
// 1.5 MiB resident after the start, a few pages of it used afterwards)
// are unmapped the same way.
//
// A mapping is left alone when any of its pages is the process's own copy
// (smaps' Anonymous, e.g. a debugger's breakpoint): dropping it would
// bring back the file's bytes. It is best effort: an error (no /proc)
// leaves the mappings as they are.
func unmapStartupPages() (int64, error) {
	startupPages.once.Do(func() {
		startupPages.bytes, startupPages.err = unmapExecutablePages()
	})
	return startupPages.bytes, startupPages.err
}

// unmapExecutablePages is unmapStartupPages without the once.
func unmapExecutablePages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	ranges, err := cleanExecutableMappings(smaps, exe)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, r := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_DONTNEED); errno != 0 {
			return total, fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, errno)
		}
		total += int64(r.end - r.start)
	}
	return total, nil
}

// addrRange is a mapping's addresses, [start, end).
type addrRange struct{ start, end uintptr }

// cleanExecutableMappings parses smaps (/proc/PID/smaps) and returns the
// private read-only mappings (code "r-xp", read-only data "r--p") of the
// file exe and of the shared objects loaded with it (a file named *.so or
// *.so.N, such as libc.so.6 and ld-linux-x86-64.so.2) that hold no page
// of their own (Anonymous: 0 kB).
func cleanExecutableMappings(smaps []byte, exe string) ([]addrRange, error) {
	var out []addrRange
	var cur addrRange
	var inExe bool
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: "start-end perms offset dev inode [path]"
			inExe = false
			if len(f) < 6 || (f[1] != "r-xp" && f[1] != "r--p") || !programFile(strings.Join(f[5:], " "), exe) {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			s, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil || e <= s {
				return nil, fmt.Errorf("smaps: bad mapping line %q", line)
			}
			cur, inExe = addrRange{uintptr(s), uintptr(e)}, true
			continue
		}
		if inExe && f[0] == "Anonymous:" {
			inExe = false
			if len(f) >= 2 && f[1] == "0" {
				out = append(out, cur)
			}
		}
	}
	return out, sc.Err()
}

// programFile reports whether a mapping's file is the program's: exe, or a
// shared object loaded with it (an absolute path whose name is *.so or
// *.so.N).
func programFile(path, exe string) bool {
	if path == exe {
		return true
	}
	if !strings.HasPrefix(path, "/") {
		return false // [heap], [vdso], an anonymous mapping's name
	}
	base := path[strings.LastIndexByte(path, '/')+1:]
	i := strings.Index(base, ".so")
	if i <= 0 {
		return false
	}
	rest := base[i+len(".so"):]
	for rest != "" {
		if rest[0] != '.' || len(rest) == 1 {
			return false
		}
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 1 {
			return false
		}
		rest = rest[j:]
	}
	return true
}
