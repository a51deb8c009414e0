package sandbox

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// directEnv runs every helper start of this package's tests without the
// shim where PrepareDirect can (TestEveryShimTestPassesDirect sets it), as
// the supervisor does: the rest, and every direct start that fails before
// its command ran, go through the shim.
const directEnv = "KIN_SANDBOX_TEST_DIRECT"

var (
	directMode   = os.Getenv(directEnv) == "1"
	directStarts atomic.Int64
	shimStarts   atomic.Int64
)

// directCountsLine starts the line a direct-mode test binary prints last.
const directCountsLine = "kin-sandbox-test direct-and-shim-starts:"

// runDirectArgs starts the shim's command line args as a direct start,
// with the test's environment and files as the shim's descriptors 3 and
// up, and waits for it. false: the start needs the shim (nothing ran).
func runDirectArgs(t testing.TB, args []string, files []*os.File) (run, bool) {
	t.Helper()
	spec, err := parseArgs(args)
	if err != nil {
		return run{}, false
	}
	// As the runner does (resolveCommand): the daemon's PATH.
	if !strings.Contains(spec.Argv[0], "/") {
		p, err := exec.LookPath(spec.Argv[0])
		if err != nil {
			return run{}, false
		}
		spec.Argv = append([]string{p}, spec.Argv[1:]...)
	}
	d, err := PrepareDirect(spec, files, nil)
	if err != nil {
		return run{}, false
	}
	r, ok, err := startDirect(d, append(os.Environ(), helperEnv+"=1"), nil)
	if err != nil {
		t.Fatalf("direct start: %v", err)
	}
	return r, ok
}

// startDirect starts d with env and cred, as the supervisor does, and waits
// for it (testTimeout). false: nothing started.
func startDirect(d *Direct, env []string, cred *syscall.Credential) (run, bool, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return run{}, false, err
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return run{}, false, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return run{}, false, err
	}
	attr := &syscall.ProcAttr{Env: env, Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()},
		Sys: &syscall.SysProcAttr{Setpgid: true, Ptrace: true, Credential: cred}}
	argv := d.Argv()
	pid, err := d.Start(forkExec(argv, attr))
	outW.Close()
	errW.Close()
	if pid <= 0 {
		outR.Close()
		errR.Close()
		return run{}, false, nil
	}
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&stdout, outR); outR.Close() }()
	go func() { defer wg.Done(); io.Copy(&stderr, errR); errR.Close() }()
	timer := time.AfterFunc(testTimeout, func() { unix.Kill(pid, unix.SIGKILL) })
	defer timer.Stop()
	var ws syscall.WaitStatus
	for {
		_, werr := syscall.Wait4(pid, &ws, 0, nil)
		if werr != syscall.EINTR {
			break
		}
	}
	wg.Wait()
	if err != nil {
		return run{}, true, err
	}
	r := run{stdout: stdout.String(), stderr: stderr.String(), code: ws.ExitStatus()}
	if ws.Signaled() {
		r.code = 128 + int(ws.Signal())
	}
	return r, true, nil
}

// forkExec is a fork for Direct.Start, as the supervisor's: argv started
// with attr, whose Files are carried to the start's thread.
func forkExec(argv []string, attr *syscall.ProcAttr) ([]int, func([]int) (int, error)) {
	carry := make([]int, len(attr.Files))
	for i, f := range attr.Files {
		carry[i] = int(f)
	}
	return carry, func(fds []int) (int, error) {
		a := *attr
		a.Files = make([]uintptr, len(fds))
		for i, fd := range fds {
			a.Files[i] = uintptr(fd)
		}
		return syscall.ForkExec(argv[0], argv, &a)
	}
}
