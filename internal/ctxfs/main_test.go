package ctxfs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/kin"
)

// helperEnv turns the test binary into a helper process instead of running
// tests: "crash-writer" rewrites a tree until it is killed (TestCrash),
// "probe" tries file operations and reports each one's errno (run as
// another uid by TestOtherUIDDenied), "holder" keeps a file open for
// writing and writes through it on demand (TestSparesStayInTheirSession). helperArgs carries their JSON input.
const (
	helperEnv  = "KIN_CTXFS_TEST_HELPER"
	helperArgs = "KIN_CTXFS_TEST_ARGS"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "crash-writer":
		os.Exit(crashWriter(os.Getenv(helperArgs)))
	case "probe":
		os.Exit(probe(os.Getenv(helperArgs)))
	case "holder":
		os.Exit(holder(os.Getenv(helperArgs)))
	}
	os.Exit(m.Run())
}

// The clock of every test tree.
var t0 = time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it gives files to other uids")
	}
}

func openFS(t *testing.T, root string, o ctxfs.Options) *ctxfs.FS {
	t.Helper()
	f, err := ctxfs.Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// agentFixture is an agent as the daemon would describe it.
func agentFixture(id kin.AgentID, name string, parent kin.AgentID, pid int) *kin.Agent {
	a := &kin.Agent{
		ID: id, Name: name, Role: strings.SplitN(name, "-", 2)[0], Parent: parent, Responsible: "shai@example.com",
		Life: kin.LifeOwned, Status: kin.StatusActive, State: kin.StateActive,
		CreatedAt: t0, CreatedBy: kin.Operator, UpdatedAt: t0,
		PID: pid, Command: []string{"/usr/bin/agent", "--name", name}, Restart: kin.RestartNever, StartedAt: t0,
	}
	if parent != 0 {
		a.Generation = 1
		a.CreatedBy = kin.AgentCreatedBy(parent)
	}
	return a
}

// runtimeFixture is how an agent runs; a child (parent set) sees a subset
// of its parent's mounts and policy, as in seed 001's review handoff.
func runtimeFixture(o ctxfs.Owner, parent ctxfs.ParentRef, id kin.AgentID) ctxfs.Runtime {
	rt := ctxfs.Runtime{
		UID: o.UID, GID: o.GID, Groups: []int{o.GID},
		Iso: "cgroup2", Cwd: "/work",
		Env:    []string{"PATH=/usr/bin:/bin", "HOME=/work", "KIN_CTX=/ctx", "KIN_SESSION=/ctx/x"},
		Path:   []string{"/usr/local/bin", "/usr/bin", "/bin"},
		Mount:  []string{"/work rw"},
		Model:  "claude-sonnet-4-5",
		Policy: json.RawMessage(`{ "fs": {"/work": "rw"} }`),
		Log:    fmt.Sprintf("/var/lib/kin/logs/%d.log", id),
		Parent: parent,
	}
	if !parent.IsZero() {
		rt.Mount = []string{"/work/docs ro"}
		rt.Policy = json.RawMessage(`{ "fs": {"/work/docs": "ro"} }`)
	}
	return rt
}

// probeOp is one operation a probe tries: read, list, write (create a new
// file) or append.
type probeOp struct {
	Op   string `json:"op"`
	Path string `json:"path"`
}

// probe runs the operations in args and prints one line per operation:
// "ok" or the errno's name.
func probe(args string) int {
	var ops []probeOp
	if err := json.Unmarshal([]byte(args), &ops); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, op := range ops {
		var err error
		switch op.Op {
		case "read":
			_, err = os.ReadFile(op.Path)
		case "list":
			_, err = os.ReadDir(op.Path)
		case "write":
			err = os.WriteFile(op.Path, []byte("written by a probe\n"), 0o600)
		case "append":
			var f *os.File
			if f, err = os.OpenFile(op.Path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, err = io.WriteString(f, "{}\n")
				f.Close()
			}
		default:
			err = fmt.Errorf("unknown op %q", op.Op)
		}
		fmt.Println(errnoName(err))
	}
	return 0
}

func errnoName(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		switch errno {
		case syscall.EACCES:
			return "EACCES"
		case syscall.EPERM:
			return "EPERM"
		case syscall.ENOENT:
			return "ENOENT"
		}
		return fmt.Sprintf("errno %d", int(errno))
	}
	return err.Error()
}

// listTree returns every path below root, relative, for checks that walk
// the tree.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
