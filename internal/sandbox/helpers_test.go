package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary a helper: "<test binary> shim ARGS" runs
// Main(ARGS) (the shim, as "kin sandbox-exec ARGS" would), "<test binary>
// probe OPS" runs the probe below. Sandboxed processes inherit it, so a
// probe or a nested shim can run inside the sandbox.
const helperEnv = "KIN_SANDBOX_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" && len(os.Args) > 1 {
		switch os.Args[1] {
		case "shim":
			os.Exit(Main(os.Args[2:], os.Stderr))
		case "probe":
			os.Exit(probe(os.Args[2:]))
		}
	}
	code := m.Run()
	if directMode {
		fmt.Fprintf(os.Stderr, "%s %d %d\n", directCountsLine, directStarts.Load(), shimStarts.Load())
	}
	os.Exit(code)
}

// testTimeout bounds every helper process.
const testTimeout = 60 * time.Second

// probeResult is one operation the probe tried inside the sandbox.
type probeResult struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	OK    bool   `json:"ok"`
	Errno string `json:"errno,omitempty"` // e.g. "EACCES"
	Err   string `json:"err,omitempty"`
	N     int    `json:"n,omitempty"` // bytes read, entries listed, files opened
}

// probe runs operations given as "op:path" and prints one JSON line each:
// read, write (create or truncate), append (an existing file), list,
// mkdir, remove, rename (path "old|new"), connect (a unix socket), kill
// (path a pid: SIGTERM), exec
// (through os/exec, as Go programs start children), openmany (path
// "file|n": opens file up to n times, N is how many succeeded), fdsof (N
// is how many open descriptors are the file at path), threads0 (path a
// pid: N is how many of its threads a null signal reaches).
func probe(ops []string) int {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for _, o := range ops {
		op, path, ok := strings.Cut(o, ":")
		if !ok {
			fmt.Fprintf(os.Stderr, "probe: bad op %q\n", o)
			return 3
		}
		r := probeResult{Op: op, Path: path}
		var err error
		switch op {
		case "read":
			var b []byte
			b, err = os.ReadFile(path)
			r.N = len(b)
		case "write":
			err = os.WriteFile(path, []byte("written\n"), 0o644)
		case "append":
			var f *os.File
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				_, err = f.WriteString("appended\n")
				f.Close()
			}
		case "list":
			var es []os.DirEntry
			es, err = os.ReadDir(path)
			r.N = len(es)
		case "mkdir":
			err = os.Mkdir(path, 0o755)
		case "remove":
			err = os.Remove(path)
		case "rename":
			from, to, _ := strings.Cut(path, "|")
			err = os.Rename(from, to)
		case "connect":
			var fd int
			fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
				unix.Close(fd)
			}
		case "exec":
			err = exec.Command(path).Run()
		case "kill":
			var pid int
			if pid, err = strconv.Atoi(path); err == nil {
				err = syscall.Kill(pid, syscall.SIGTERM)
			}
		case "threads0":
			// How many threads of process path a null signal reaches
			// (tgkill(pid, tid, 0) for each of /proc/pid/task).
			var es []os.DirEntry
			if es, err = os.ReadDir("/proc/" + path + "/task"); err == nil {
				pid, _ := strconv.Atoi(path)
				for _, e := range es {
					if tid, _ := strconv.Atoi(e.Name()); unix.Tgkill(pid, tid, 0) == nil {
						r.N++
					}
				}
			}
		case "fdsof":
			// How many of the probe's descriptors are the file at path.
			var want unix.Stat_t
			var es []os.DirEntry
			if err = unix.Stat(path, &want); err == nil {
				es, err = os.ReadDir("/proc/self/fd")
			}
			for _, e := range es {
				n, _ := strconv.Atoi(e.Name())
				var st unix.Stat_t
				if unix.Fstat(n, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
					r.N++
				}
			}
		case "openmany":
			file, count, _ := strings.Cut(path, "|")
			n, _ := strconv.Atoi(count)
			var files []*os.File
			for range n {
				var f *os.File
				if f, err = os.Open(file); err != nil {
					break
				}
				files = append(files, f)
			}
			r.N = len(files)
			for _, f := range files {
				f.Close()
			}
		default:
			fmt.Fprintf(os.Stderr, "probe: unknown op %q\n", op)
			return 3
		}
		r.OK = err == nil
		if err != nil {
			r.Err = err.Error()
			var errno syscall.Errno
			if errors.As(err, &errno) {
				r.Errno = unix.ErrnoName(errno)
			}
		}
		if err := enc.Encode(r); err != nil {
			return 3
		}
	}
	return 0
}

// run is a finished helper process.
type run struct {
	stdout, stderr string
	code           int
}

// testExe is the test binary, canonical: the sandboxed probe runs it.
func testExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// requireLandlock skips when the kernel has no Landlock.
func requireLandlock(t testing.TB) {
	t.Helper()
	if ABI() == 0 {
		t.Skip("Landlock is unavailable on this kernel (ABI 0): nothing to enforce; these machines should have it")
	}
}

// tempDir is t.TempDir, canonical (kin grants canonical paths).
func tempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// baseSpec grants what a probe needs: the system paths, the devices, the
// test binary itself (a file rule). argv runs the probe with ops.
func baseSpec(t testing.TB, ops ...string) Spec {
	exe := testExe(t)
	return Spec{
		Restrict: true,
		RO:       append(DefaultSystemRO(), exe),
		RW:       DefaultSystemRW(),
		Argv:     append([]string{exe, "probe"}, ops...),
	}
}

// runShim runs the shim with spec, as the daemon would.
func runShim(t testing.TB, spec Spec) run {
	t.Helper()
	args, err := Args(spec)
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	return runShimArgs(t, args)
}

// runShimArgs runs the shim with raw arguments.
func runShimArgs(t testing.TB, args []string) run {
	t.Helper()
	return runShimArgsFiles(t, args, nil)
}

// runShimArgsFiles runs the shim with raw arguments and files as its
// descriptors 3 and up, as the daemon passes held grants.
func runShimArgsFiles(t testing.TB, args []string, files []*os.File) run {
	t.Helper()
	if directMode {
		if r, ok := runDirectArgs(t, args, files); ok {
			directStarts.Add(1)
			return r
		}
		shimStarts.Add(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testExe(t), append([]string{"shim"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.ExtraFiles = files
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("shim did not end within %v (killed); stderr: %s", testTimeout, stderr.String())
	}
	r := run{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("shim: %v; stderr: %s", err, stderr.String())
	}
	return r
}

// probeResults runs the probe in the sandbox and returns its results, one
// per op; the shim and the probe must succeed.
func probeResults(t testing.TB, spec Spec) []probeResult {
	t.Helper()
	return probeResultsFiles(t, spec, nil)
}

// probeResultsFiles is probeResults with files as descriptors 3 and up.
func probeResultsFiles(t testing.TB, spec Spec, files []*os.File) []probeResult {
	t.Helper()
	args, err := Args(spec)
	if err != nil {
		t.Fatalf("Args: %v", err)
	}
	r := runShimArgsFiles(t, args, files)
	if r.code != 0 {
		t.Fatalf("shim exited %d; stderr: %s", r.code, r.stderr)
	}
	var res []probeResult
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	for dec.More() {
		var pr probeResult
		if err := dec.Decode(&pr); err != nil {
			t.Fatalf("probe output %q: %v", r.stdout, err)
		}
		res = append(res, pr)
	}
	return res
}

// expect checks one probe result: allowed, or denied by the kernel with
// EACCES or EPERM.
func expect(t testing.TB, r probeResult, allowed bool) {
	t.Helper()
	if allowed {
		if !r.OK {
			t.Errorf("%s %s: want allowed, got %s", r.Op, r.Path, r.Err)
		}
		return
	}
	if r.OK {
		t.Errorf("%s %s: want denied (EACCES/EPERM), but it succeeded", r.Op, r.Path)
	} else if r.Errno != "EACCES" && r.Errno != "EPERM" {
		t.Errorf("%s %s: want EACCES or EPERM, got %s", r.Op, r.Path, r.Err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// oneLineFailure checks a shim failure: code, and one stderr line
// starting "kin sandbox: " that contains every want.
func oneLineFailure(t testing.TB, r run, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit status %d, want %d; stderr: %s", r.code, code, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "kin sandbox: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("stderr is not one line starting %q: %q", "kin sandbox: ", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not say %q", r.stderr, w)
		}
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("stderr shows a panic: %s", r.stderr)
	}
}
