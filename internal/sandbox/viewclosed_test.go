package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// aclGranting is a POSIX access ACL (the system.posix_acl_access xattr,
// version 2) giving uid read and search on top of mode 0700.
func aclGranting(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, ^uint32(0)}, {0x02, 5, uid}, {0x04, 0, ^uint32(0)}, {0x10, 5, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// TestViewLeavesOutEntriesClosedToTheAgent: an entry on the chains that
// gives an agent's user nothing (no permission for others, neither its
// owner nor its group, no ACL) gets no rule in that agent's ruleset: the
// kernel refuses the agent everything there anyway, and in a busy /tmp
// most entries are such (each rule is a system call in every spawn). The
// probe runs as root, whom modes do not stop, so what Landlock allows
// shows: the closed entry is refused, every other kept, and the closed
// entry is ruled again once it is opened.
func TestViewLeavesOutEntriesClosedToTheAgent(t *testing.T) {
	requireLandlock(t)
	// With the inotify watch that tells the View which entries changed,
	// and without one (each closed entry is looked at every time).
	for _, watched := range []bool{true, false} {
		t.Run(map[bool]string{true: "watched", false: "unwatched"}[watched], func(t *testing.T) { testViewClosed(t, watched) })
	}
}

func testViewClosed(t *testing.T, watched bool) {
	const agent = 65534
	base := tempDir(t)
	openChain(t, base)
	home := filepath.Join(base, "home")
	dirs := map[string]os.FileMode{"home": 0o700, "closed": 0o700, "open": 0o755, "mine": 0o700, "ours": 0o770, "acl": 0o700, "acl-later": 0o700}
	for name, mode := range dirs {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(base, "mine"), agent, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(base, "ours"), 0, agent); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(base, "acl"), "system.posix_acl_access", aclGranting(agent), 0); err != nil {
		t.Skipf("no POSIX ACLs here: %v", err)
	}
	v := NewView([]string{home}, []string{testExe(t)})
	defer v.Close()
	if v.watch < 0 && watched {
		t.Skip("no inotify instance to be had")
	}
	if !watched && v.watch >= 0 {
		unix.Close(v.watch)
		v.watch = -1
	}
	probe := func(uid int) map[string]bool {
		t.Helper()
		var ops []string
		for _, name := range []string{"closed", "open", "mine", "ours", "acl", "acl-later"} {
			ops = append(ops, "list:"+filepath.Join(base, name))
		}
		spec := allSpec(t, []string{home}, ops...)
		spec.RO = []string{testExe(t)} // in a 0700 directory of go test's
		fd, err := v.Ruleset(ABI(), spec.ScopeSignals, uid, []int{uid})
		if err != nil {
			t.Fatalf("Ruleset: %v", err)
		}
		f := os.NewFile(uintptr(fd), "view")
		defer f.Close()
		spec.ViewFD = 3
		got := map[string]bool{}
		for _, r := range probeResultsFiles(t, spec, []*os.File{f}) {
			got[filepath.Base(r.Path)] = r.OK
		}
		return got
	}
	want := map[string]bool{"closed": false, "open": true, "mine": true, "ours": true, "acl": true, "acl-later": false}
	check := func(step string, got, want map[string]bool) {
		t.Helper()
		for name, ok := range want {
			if got[name] != ok {
				t.Errorf("%s: %s allowed %v, want %v", step, name, got[name], ok)
			}
		}
	}
	check("the agent's ruleset", probe(agent), want)
	// Opened after the View first saw it: ruled from the next spawn on;
	// as is a closed entry given an ACL naming the agent's user. (One
	// closed since keeps its rule, as the walk's: the modes refuse.)
	if err := os.Chmod(filepath.Join(base, "closed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, "open"), 0o700); err != nil {
		t.Fatal(err)
	}
	want["closed"] = true
	check("after a chmod", probe(agent), want)
	if err := unix.Setxattr(filepath.Join(base, "acl-later"), "system.posix_acl_access", aclGranting(agent), 0); err != nil {
		t.Fatal(err)
	}
	want["acl-later"] = true
	check("after an ACL", probe(agent), want)
}
