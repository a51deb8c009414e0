package ctxfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveTempsSparesItsOwn: RemoveTemps removes the transient entries an
// earlier run left (another FS on the same root) and never this FS's own,
// which a write in flight may be using: a daemon runs it beside its writes.
func TestRemoveTempsSparesItsOwn(t *testing.T) {
	root := t.TempDir()
	earlier, err := Open(root, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer earlier.Close()
	f, err := Open(root, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(root, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	left := []string{
		filepath.Join(root, earlier.transient("a", tmpTag)),
		filepath.Join(root, "agent", earlier.transient("b.d", stageTag)),
		filepath.Join(root, "agent", ".c.d.kin-rm-0123456789abcdef"), // before runs were tagged
	}
	own := []string{
		filepath.Join(root, f.transient("a", tmpTag)),
		filepath.Join(root, "agent", f.transient("b.d", stageTag)),
		filepath.Join(root, "agent", f.transient("c.d", rmTag)),
	}
	for _, p := range append(left, own...) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.RemoveTemps()
	if err != nil || n != len(left) {
		t.Fatalf("RemoveTemps = %d, %v; want %d", n, err, len(left))
	}
	for _, p := range left {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s (an earlier run's) is left: %v", p, err)
		}
	}
	for _, p := range own {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s (this run's) was removed: %v", p, err)
		}
	}
}
