package authority

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// The descriptor plumbing of mounts.go on real files: what a check
// records, and what a start holds.

// grantsAuthority is an authority with only its cache: agent 1 (the
// parent) checked parentMounts, agent 2 (the child) childMounts (nil: it
// inherits).
func grantsAuthority(t *testing.T, parentMounts, childMounts map[string]kin.Mode) (*Authority, []kin.PolicyLayer) {
	t.Helper()
	au := &Authority{}
	au.own = map[kin.AgentID]*permOwn{}
	layers := []kin.PolicyLayer{}
	for id, m := range map[kin.AgentID]map[string]kin.Mode{1: parentMounts, 2: childMounts} {
		p := &kin.Policy{Mounts: m}
		ids, err := identifyMounts(p)
		if err != nil {
			t.Fatalf("identify agent %d's mounts: %v", id, err)
		}
		au.own[id] = &permOwn{policy: p, mountIDs: ids}
	}
	for _, id := range []kin.AgentID{1, 2} {
		layers = append(layers, kin.PolicyLayer{Source: kin.SourcePolicy, Agent: id, Policy: *au.own[id].policy})
	}
	return au, layers
}

func hold(t *testing.T, au *Authority, layers []kin.PolicyLayer) (sandbox.Spec, []*os.File, error) {
	t.Helper()
	spec := sandbox.Spec{Restrict: true, Argv: []string{"/bin/true"}}
	files, err := au.HoldMounts(layers, policy.Flatten(layers), &spec)
	t.Cleanup(func() { CloseFiles(files) })
	return spec, files, err
}

func grantsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHoldMountsGrantsAnUnchangedPathAsADescriptor(t *testing.T) {
	dir := grantsDir(t)
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	au, layers := grantsAuthority(t, map[string]kin.Mode{dir: kin.ModeRW}, map[string]kin.Mode{work: kin.ModeRO})
	spec, files, err := hold(t, au, layers)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Held) != 1 || len(files) != 1 || spec.Held[0].Path != work || spec.Held[0].FD != 3 || spec.Held[0].RW {
		t.Fatalf("held %+v (%d files), want %s ro as descriptor 3", spec.Held, len(files), work)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(files[0].Fd()), &st); err != nil {
		t.Fatal(err)
	}
	var want unix.Stat_t
	if err := unix.Stat(work, &want); err != nil {
		t.Fatal(err)
	}
	if st.Ino != want.Ino || spec.Held[0].Ino != want.Ino || spec.Held[0].Dev != uint64(want.Dev) {
		t.Errorf("descriptor is inode %d (spec says %d), want %s's %d", st.Ino, spec.Held[0].Ino, work, want.Ino)
	}
	if _, err := sandbox.Args(spec); err != nil {
		t.Errorf("the shim would refuse the spec: %v", err)
	}
}

func TestHoldMountsRefusesAPathSwappedBetweenCheckAndStart(t *testing.T) {
	for _, swap := range []struct {
		name string
		do   func(t *testing.T, path, other string)
		want string
	}{
		{"for a link", func(t *testing.T, path, other string) {
			mustRename(t, path, path+".old")
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}, "is now a link"},
		{"for a folder", func(t *testing.T, path, other string) {
			mustRename(t, path, path+".old")
			mustRename(t, other, path)
		}, "is no longer the file the policy check of agent 2 approved"},
		{"under a link", func(t *testing.T, path, other string) {
			parent := filepath.Dir(path)
			mustRename(t, parent, parent+".old")
			if err := os.Symlink(parent+".old", parent); err != nil {
				t.Fatal(err)
			}
		}, "is now a link"},
	} {
		t.Run(swap.name, func(t *testing.T) {
			dir := grantsDir(t)
			work, hidden := filepath.Join(dir, "p", "work"), filepath.Join(dir, "hidden")
			for _, p := range []string{work, hidden} {
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			au, layers := grantsAuthority(t, map[string]kin.Mode{dir: kin.ModeRW}, map[string]kin.Mode{work: kin.ModeRW})
			swap.do(t, work, hidden)
			_, files, err := hold(t, au, layers)
			if err == nil || kin.ErrorCodeOf(err) != kin.ECodeDenied || !strings.Contains(err.Error(), `"`+work+`"`) || !strings.Contains(err.Error(), swap.want) {
				t.Fatalf("hold = %v, want permission_denied naming %s and saying %q", err, work, swap.want)
			}
			if files != nil {
				t.Errorf("files held after a refusal: %v", files)
			}
		})
	}
}

func TestHoldMountsRefusesAPathNoLongerBeneathItsAncestorsCheckedFolder(t *testing.T) {
	dir := grantsDir(t)
	q := filepath.Join(dir, "q")
	work := filepath.Join(q, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	au, layers := grantsAuthority(t, map[string]kin.Mode{q: kin.ModeRW}, map[string]kin.Mode{work: kin.ModeRW})
	// The child's folder is the one its check saw, but the parent's q is
	// another folder now: the parent's grant no longer covers it.
	mustRename(t, q, q+".old")
	if err := os.Mkdir(q, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRename(t, filepath.Join(q+".old", "work"), work)
	_, _, err := hold(t, au, layers)
	if err == nil || kin.ErrorCodeOf(err) != kin.ECodeDenied || !strings.Contains(err.Error(), "no longer beneath the file \""+q+"\" was") {
		t.Fatalf("hold = %v, want a refusal naming %s", err, q)
	}
	// Nothing is granted under a mount that did not exist when checked.
	au.own[1].mountIDs[q] = FileID{}
	if _, _, err = hold(t, au, layers); err == nil || !strings.Contains(err.Error(), "which did not exist when the policy check of agent 1 approved it") {
		t.Fatalf("hold = %v, want a refusal: %s was missing when checked", err, q)
	}
}

func TestHoldMountsHoldsAnInheritingChildToItsAncestorsCheck(t *testing.T) {
	dir := grantsDir(t)
	work, hidden := filepath.Join(dir, "work"), filepath.Join(dir, "hidden")
	for _, p := range []string{work, hidden} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The child asks for no mounts: it inherits work from its parent,
	// which the parent's check approved as the folder it was then.
	au, layers := grantsAuthority(t, map[string]kin.Mode{work: kin.ModeRW}, nil)
	mustRename(t, work, work+".old")
	mustRename(t, hidden, work)
	_, _, err := hold(t, au, layers)
	if err == nil || !strings.Contains(err.Error(), "policy check of agent 1 approved") {
		t.Fatalf("hold = %v, want a refusal naming agent 1's check", err)
	}
	// Put back, it is granted again.
	mustRename(t, work, hidden)
	mustRename(t, work+".old", work)
	if spec, _, err := hold(t, au, layers); err != nil || len(spec.Held) != 1 || !spec.Held[0].RW {
		t.Fatalf("hold = %+v, %v; want work held rw", spec.Held, err)
	}
}

func TestHoldMountsGrantsNothingWhereNothingWasChecked(t *testing.T) {
	dir := grantsDir(t)
	later := filepath.Join(dir, "later")
	au, layers := grantsAuthority(t, map[string]kin.Mode{dir: kin.ModeRW}, map[string]kin.Mode{later: kin.ModeRW})
	if err := os.Mkdir(later, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, files, err := hold(t, au, layers)
	if err != nil || len(spec.Held) != 0 || len(files) != 0 {
		t.Fatalf("hold = %+v, %v; want nothing held: %s did not exist when checked", spec.Held, err, later)
	}
}

func TestHoldMountsRefusesMountsWithoutARecordedCheck(t *testing.T) {
	dir := grantsDir(t)
	au, layers := grantsAuthority(t, map[string]kin.Mode{dir: kin.ModeRW}, nil)
	au.own[1].mountIDs = nil // as a policy stored by an older kin
	_, _, err := hold(t, au, layers)
	if err == nil || !strings.Contains(err.Error(), "no record of the file its policy check approved") || !strings.Contains(err.Error(), "spawn it again") {
		t.Fatalf("hold = %v, want a refusal that says how to fix it", err)
	}
}

func TestIdentifyMountsRefusesALink(t *testing.T) {
	dir := grantsDir(t)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	_, err := identifyMounts(&kin.Policy{Mounts: map[string]kin.Mode{link: kin.ModeRO}})
	if err == nil || kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), `"`+link+`"`) {
		t.Fatalf("identify = %v, want invalid naming %s", err, link)
	}
}

func TestStoredPolicyKeepsTheCheckedFiles(t *testing.T) {
	in := storedPolicy{Policy: kin.Policy{Mounts: map[string]kin.Mode{"/work": kin.ModeRW}}, MountIDs: map[string]FileID{"/work": {Dev: 1, Ino: 2}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out storedPolicy
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Mounts["/work"] != kin.ModeRW || out.MountIDs["/work"] != (FileID{1, 2}) {
		t.Fatalf("round trip of %s = %+v", b, out)
	}
	// What an older kin stored reads as a policy without records.
	var old storedPolicy
	if err := json.Unmarshal([]byte(`{"mounts":{"/work":"rw"}}`), &old); err != nil || old.MountIDs != nil || old.Mounts["/work"] != kin.ModeRW {
		t.Fatalf("old policy = %+v, %v", old, err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
