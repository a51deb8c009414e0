package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestUnmapExecutablePages unmaps the test binary's code and read-only
// data as a started daemon does: their resident pages fall, the program
// runs on (its code maps back as it runs), and the process's own pages
// (its data, its heap) are untouched.
func TestUnmapExecutablePages(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skipf("no /proc/self/exe: %v", err)
	}
	before, libcBefore := exeRss(t, exe), libcRss(t)
	keep := strings.Repeat("kept", 1<<10) // a heap page of the process's own
	n, err := unmapExecutablePages()
	if err != nil {
		t.Fatal(err)
	}
	after, libcAfter := exeRss(t, exe), libcRss(t)
	if libcBefore > 0 && libcAfter >= libcBefore { // a cgo-linked test binary
		t.Errorf("libc's code: %d KiB resident, was %d", libcAfter, libcBefore)
	}
	if n == 0 || after["r-xp"] >= before["r-xp"] || after["r--p"] >= before["r--p"] {
		t.Fatalf("unmapped %d bytes: resident KiB of the binary's mappings before %v, after %v", n, before, after)
	}
	if after["rw-p"] != before["rw-p"] {
		t.Fatalf("the binary's data pages changed: %d KiB, were %d", after["rw-p"], before["rw-p"])
	}
	if keep != strings.Repeat("kept", 1<<10) || !regexp.MustCompile(`^k+e+p+t+$`).MatchString("kkeeptt") {
		t.Fatal("the program's data or code changed")
	}
	t.Logf("unmapped %d bytes; resident KiB before %v, after %v; libc's code %d, then %d", n, before, after, libcBefore, libcAfter)
}

// libcRss is the resident KiB of libc's code mapped in this process (0
// where the binary is not cgo-linked).
func libcRss(t *testing.T) int {
	t.Helper()
	maps, err := filepath.Glob("/usr/lib*/*/libc.so.6")
	if err != nil || len(maps) == 0 {
		return 0
	}
	total := 0
	for _, m := range maps {
		total += exeRss(t, m)["r-xp"]
	}
	return total
}

// exeRss sums the resident KiB of exe's mappings by permission.
func exeRss(t *testing.T, exe string) map[string]int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	perm := ""
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !strings.HasSuffix(f[0], ":"):
			perm = ""
			if len(f) >= 6 && strings.Join(f[5:], " ") == exe {
				perm = f[1]
			}
		case perm != "" && f[0] == "Rss:":
			kb, _ := strconv.Atoi(f[1])
			out[perm] += kb
		}
	}
	return out
}

const testSmaps = `00400000-0136e000 r-xp 00000000 fe:00 99 /opt/kin bin
Size:              15800 kB
Rss:               13344 kB
Anonymous:             0 kB
0136e000-0282c000 r--p 00f6e000 fe:00 99 /opt/kin bin
Rss:               15988 kB
Anonymous:             0 kB
0282c000-0291c000 rw-p 0242c000 fe:00 99 /opt/kin bin
Anonymous:           120 kB
02a00000-02b00000 r-xp 02400000 fe:00 99 /opt/kin bin
Anonymous:             4 kB
7fd5b5a81000-7fd5b5bd7000 r-xp 00026000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7fd5b5c45000-7fd5b5c49000 r--p 001cc000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:            16 kB
7fd5b5c49000-7fd5b5c4b000 rw-p 001d0000 fe:00 326269 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             8 kB
7fd5b5c6d000-7fd5b5c93000 r-xp 00001000 fe:00 325835 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
Anonymous:             0 kB
7fd5b5d00000-7fd5b5d10000 r--p 00000000 fe:00 4242 /var/lib/kin/data.sock
Anonymous:             0 kB
7fd5b5d10000-7fd5b5d20000 r--p 00000000 fe:00 4243 /usr/share/misc/notes.so.txt
Anonymous:             0 kB
7ffd5b5c0000-7ffd5b5c2000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7fd5541a0000-7fd5542a0000 rw-p 00000000 00:00 0 
Anonymous:           844 kB
`

// TestCleanExecutableMappings: only the read-only private mappings of the
// binary and of its shared libraries with no page of the process's own are
// unmapped (not their data, not one a debugger wrote a breakpoint into or
// the loader relocated, not another file's, not the vdso).
func TestCleanExecutableMappings(t *testing.T) {
	got, err := cleanExecutableMappings([]byte(testSmaps), "/opt/kin bin")
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0x136e000}, {0x136e000, 0x282c000}, {0x7fd5b5a81000, 0x7fd5b5bd7000}, {0x7fd5b5c6d000, 0x7fd5b5c93000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
	if _, err := cleanExecutableMappings([]byte("zz-00400000 r-xp 0 fe:00 99 /opt/kin bin\n"), "/opt/kin bin"); err == nil || !strings.Contains(err.Error(), "bad mapping line") {
		t.Fatalf("a bad address: %v", err)
	}
}

func TestProgramFile(t *testing.T) {
	for path, want := range map[string]bool{
		"/opt/kin bin":           true,
		"/usr/lib/libc.so.6":     true,
		"/lib/ld-linux.so.2":     true,
		"/usr/lib/libfoo.so":     true,
		"/usr/lib/libfoo.so.1.2": true,
		"/usr/lib/.so":           false,
		"/usr/lib/libfoo.so.":    false,
		"/usr/lib/libfoo.so.x":   false,
		"/usr/lib/a.so.txt":      false,
		"/usr/lib/a.sox":         false,
		"libc.so.6":              false,
		"[vdso]":                 false,
		"":                       false,
	} {
		if got := programFile(path, "/opt/kin bin"); got != want {
			t.Errorf("programFile(%q) = %v, want %v", path, got, want)
		}
	}
}

func FuzzCleanExecutableMappings(f *testing.F) {
	f.Add([]byte(testSmaps))
	f.Add([]byte("00400000-00300000 r-xp 0 fe:00 99 /opt/kin bin\nAnonymous: 0 kB\n"))
	f.Fuzz(func(t *testing.T, smaps []byte) {
		got, err := cleanExecutableMappings(smaps, "/opt/kin bin")
		for _, r := range got {
			if err == nil && r.end <= r.start {
				t.Fatalf("an empty range %#v", r)
			}
		}
	})
}
