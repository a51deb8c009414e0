package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/kintest"
)

// TestAgentDirectoriesAreSpread: on ext2/3/4 the daemon sets FS_TOPDIR_FL
// (chattr +T) on its home, the ctx root, ctx/home and ctx/agent (and kin on
// each session's context/child), so that
// each agent's directories go to a block group the allocator chooses
// rather than beside a busy parent's (internal/runner/topdir.go), and an
// agent spawned there runs as before.
func TestAgentDirectoriesAreSpread(t *testing.T) {
	home := kintest.TempHome(t)
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(home), &st); err != nil {
		t.Fatal(err)
	}
	const ext4Magic = 0xEF53
	if st.Type != ext4Magic {
		t.Skipf("the temporary directory is not on ext2/3/4 (file system magic %#x): FS_TOPDIR_FL is theirs", st.Type)
	}
	d := kintest.StartDaemon(t, kintest.WithHome(home))
	dirs := []string{home, filepath.Join(home, "ctx"), filepath.Join(home, "ctx", "home")}
	if !d.ServedControl() { // served (ctxfuse), agent/ makes no inode on the disk
		dirs = append(dirs, filepath.Join(home, "ctx", "agent"))
	}
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if flags&0x00020000 == 0 {
			t.Errorf("%s: FS_TOPDIR_FL is not set (flags %#x)", dir, flags)
		}
	}
	parent := spawnAgent(t, d.Client, "spread", 0, "sleep")
	spawnAgent(t, d.Client, "spread-child", parent.ID, "sleep")
	// A session's context/child/, one folder per child.
	children := filepath.Join(home, "ctx", "home", uidOf(d, parent.ID), "agent", "spread", "session", "default", "context", "child")
	f, err := os.Open(children)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil || flags&0x00020000 == 0 {
		t.Errorf("%s: FS_TOPDIR_FL is not set (flags %#x, %v)", children, flags, err)
	}
}
