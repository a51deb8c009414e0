package uidrange

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testAllocator allocates from a temp host directory, checked against the
// given passwd text (and no group or subordinate ids).
func testAllocator(t *testing.T, passwd string) Allocator {
	t.Helper()
	etc := t.TempDir()
	pw := filepath.Join(etc, "passwd")
	if err := os.WriteFile(pw, []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	return Allocator{Dir: t.TempDir(), Host: HostFiles{Passwd: pw, Group: filepath.Join(etc, "none")}}
}

func mkHome(t *testing.T) string {
	t.Helper()
	h := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(h, 0o700); err != nil {
		t.Fatal(err)
	}
	return h
}

func allocate(t *testing.T, a Allocator, home string, want *Range) Range {
	t.Helper()
	got, err := a.Allocate(home, want)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", home, err)
	}
	return got.Range
}

func TestAllocateDisjointAndKeptAcrossRestarts(t *testing.T) {
	a := testAllocator(t, "root:x:0:0::/root:/bin/sh\n")
	h1, h2 := mkHome(t), mkHome(t)
	r1, r2 := allocate(t, a, h1, nil), allocate(t, a, h2, nil)
	if r1 != (Range{DefaultStart, DefaultCount}) {
		t.Errorf("first home got %v, want %d:%d", r1, DefaultStart, DefaultCount)
	}
	if r1.Overlaps(r2) {
		t.Fatalf("two homes share uids: %v and %v", r1, r2)
	}
	// A restart, with and without naming the range, keeps it.
	if again := allocate(t, a, h1, nil); again != r1 {
		t.Errorf("restart of home 1 got %v, want %v", again, r1)
	}
	if again := allocate(t, a, h2, &r2); again != r2 {
		t.Errorf("restart of home 2 with its range got %v, want %v", again, r2)
	}
	if rec, ok, err := ReadHome(h1); err != nil || !ok || rec != r1 {
		t.Errorf("home 1 records %v, %v, %v; want %v", rec, ok, err, r1)
	}
	es, err := readHostFile(filepath.Join(a.Dir, HostFileName))
	if err != nil || len(es) != 2 {
		t.Fatalf("host file = %v, %v; want two entries", es, err)
	}
}

func TestAllocateRefusesOverlapNamingTheOtherHome(t *testing.T) {
	a := testAllocator(t, "")
	h1, h2 := mkHome(t), mkHome(t)
	r1 := allocate(t, a, h1, nil)
	want := Range{r1.Start + 5, 10}
	_, err := a.Allocate(h2, &want)
	if err == nil || !strings.Contains(err.Error(), h1) || !strings.Contains(err.Error(), h2) || !strings.Contains(err.Error(), r1.String()) {
		t.Fatalf("overlapping range: err = %v; want one naming both homes and %v", err, r1)
	}
	if _, ok, _ := ReadHome(h2); ok {
		t.Errorf("a refused range was recorded in the home")
	}
}

func TestAllocateRefusesHostUsers(t *testing.T) {
	a := testAllocator(t, "kinuidtest:x:300010:300010::/:/bin/sh\n")
	h := mkHome(t)
	want := Range{300000, 100}
	_, err := a.Allocate(h, &want)
	if err == nil || !strings.Contains(err.Error(), "user kinuidtest (uid 300010)") {
		t.Fatalf("err = %v; want one naming user kinuidtest", err)
	}
	// Automatic allocation steps around the user.
	a = testAllocator(t, fmt.Sprintf("u:x:%d:1::/:/bin/sh\n", DefaultStart+3))
	if r := allocate(t, a, h, nil); r.Start != DefaultStart+4 {
		t.Errorf("automatic range %v; want it to start past the user's uid %d", r, DefaultStart+3)
	}
}

func TestAllocateRefusesChangingAHomesRange(t *testing.T) {
	a := testAllocator(t, "")
	h := mkHome(t)
	r := allocate(t, a, h, nil)
	other := Range{r.Start + r.Count, 100}
	if _, err := a.Allocate(h, &other); err == nil || !strings.Contains(err.Error(), "already runs its agents in uid range "+r.String()) {
		t.Fatalf("err = %v; want a refusal naming the recorded range", err)
	}
}

func TestAllocateReclaimsStaleEntries(t *testing.T) {
	a := testAllocator(t, "")
	gone, h := mkHome(t), mkHome(t)
	r := allocate(t, a, gone, nil)
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	got, err := a.Allocate(h, &r)
	if err != nil {
		t.Fatalf("a range of a removed home was not reclaimed: %v", err)
	}
	if len(got.Reclaimed) != 1 || got.Reclaimed[0].Home != gone {
		t.Errorf("Reclaimed = %v; want the removed home %s", got.Reclaimed, gone)
	}
}

func TestAllocateRefusesAWritableHostDir(t *testing.T) {
	a := testAllocator(t, "")
	if err := os.Chmod(a.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(mkHome(t), nil); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("err = %v; want a refusal of the 0777 host directory", err)
	}
}

// TestAllocateConcurrentProcesses starts several processes that allocate
// at once from one host directory, as daemons starting together do: each
// gets its own range and the file lists them all.
func TestAllocateConcurrentProcesses(t *testing.T) {
	if home := os.Getenv("KIN_UIDRANGE_HELPER_HOME"); home != "" {
		a := Allocator{Dir: os.Getenv("KIN_UIDRANGE_HELPER_DIR"), Host: HostFiles{Passwd: os.DevNull}}
		if _, err := a.Allocate(home, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	a := testAllocator(t, "")
	const n = 8
	homes := make([]string, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		homes[i] = mkHome(t)
		cmds[i] = exec.Command(os.Args[0], "-test.run=^TestAllocateConcurrentProcesses$")
		cmds[i].Env = append(os.Environ(), "KIN_UIDRANGE_HELPER_HOME="+homes[i], "KIN_UIDRANGE_HELPER_DIR="+a.Dir)
		cmds[i].Stderr = os.Stderr
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("allocating process: %v", err)
		}
	}
	es, err := readHostFile(filepath.Join(a.Dir, HostFileName))
	if err != nil || len(es) != n {
		t.Fatalf("host file = %v, %v; want %d entries", es, err, n)
	}
	for i, e := range es {
		for _, o := range es[i+1:] {
			if e.Overlaps(o.Range) {
				t.Errorf("%s and %s share uids: %v, %v", e.Home, o.Home, e.Range, o.Range)
			}
		}
		if rec, ok, err := ReadHome(e.Home); err != nil || !ok || rec != e.Range {
			t.Errorf("home %s records %v, %v, %v; the host file says %v", e.Home, rec, ok, err, e.Range)
		}
	}
}
