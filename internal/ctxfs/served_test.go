package ctxfs_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/ctxfuse"
	"github.com/kin-agents/kin/kin"
)

// servedValues serves fixed control values: the agents a test wrote.
type servedValues struct {
	byName map[string]kin.AgentID
	values map[kin.AgentID]ctxfs.ControlValues
}

func (s servedValues) Resolve(_ context.Context, name string) (kin.AgentID, error) {
	return s.byName[name], nil
}

func (s servedValues) Control(_ context.Context, id kin.AgentID) (ctxfs.ControlValues, error) {
	v, ok := s.values[id]
	if !ok {
		return v, fs.ErrNotExist
	}
	return v, nil
}

func (s servedValues) Group(_ context.Context, id kin.AgentID) (int, error) {
	v, ok := s.values[id]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return v.GID, nil
}

func (s servedValues) Names(context.Context) ([]ctxfuse.Entry, error) {
	var es []ctxfuse.Entry
	for n, id := range s.byName {
		es = append(es, ctxfuse.Entry{Name: n, ID: id})
	}
	return es, nil
}

// serveOver mounts the served agent/ over f's, answering with the control
// values written there (what a root daemon does instead of writing them),
// and unmounts it when the test ends, failing it if a mount is left.
func serveOver(t *testing.T, f *ctxfs.FS, names ...string) {
	t.Helper()
	if err := ctxfuse.Available(); err != nil {
		t.Skipf("FUSE: %v", err)
	}
	src := servedValues{byName: map[string]kin.AgentID{}, values: map[kin.AgentID]ctxfs.ControlValues{}}
	for _, n := range names {
		v, err := f.ReadControl(n)
		if err != nil {
			t.Fatal(err)
		}
		src.byName[n], src.values[v.Meta.ID] = v.Meta.ID, v
	}
	m, err := ctxfuse.New(f.AgentDir(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
		if n, err := ctxfuse.Mounted(f.AgentDir()); n != 0 || err != nil {
			t.Errorf("%d mounts left at %s (%v)", n, f.AgentDir(), err)
			ctxfuse.DetachStale(f.AgentDir(), nil)
		}
	})
}

// TestGoldenTwoAgentsServed: the same tree, its control files served.
func TestGoldenTwoAgentsServed(t *testing.T) {
	requireRoot(t)
	f, _, _ := buildTwoAgents(t, filepath.Join(t.TempDir(), "ctx"))
	serveOver(t, f, "coder", "rev-123")
	golden(t, filepath.Join("testdata", "golden", "two-agents.txt"), render(t, f.Root))
}
