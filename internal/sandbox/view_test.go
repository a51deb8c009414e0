package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/proctest"
)

// allSpec is the default view hiding home (granting session inside it) with
// the probe's ops. The test binary is granted read-only, as the daemon grants kin's
// binary: it is in a directory of go test's closed to others, which a
// View leaves out for an agent's user (viewclosed_test.go).
func allSpec(t testing.TB, hidden []string, ops ...string) Spec {
	return Spec{Restrict: true, All: true, Hidden: hidden, RO: []string{testExe(t)}, Argv: append([]string{testExe(t), "probe"}, ops...)}
}

func TestAllViewHidesOnlyTheHiddenPathsAndWhatWasGrantedInside(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	base := tempDir(t)
	home := filepath.Join(base, "home")
	session := filepath.Join(home, "session")
	other := filepath.Join(base, "other")
	for _, d := range []string{session, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(home, "operator.token"), "secret")
	writeFile(t, filepath.Join(other, "notes"), "visible")
	spec := allSpec(t, []string{home},
		"read:"+filepath.Join(home, "operator.token"),
		"list:"+home,
		"write:"+filepath.Join(home, "new"),
		"read:"+filepath.Join(other, "notes"),
		"write:"+filepath.Join(other, "new"),
		"write:"+filepath.Join(session, "out"),
		"read:/etc/hostname",
		"write:"+filepath.Join(base, "new-beside-home"),
	)
	spec.RW = []string{session}
	res := probeResults(t, spec)
	for i, allowed := range []bool{false, false, false, true, true, true, true, false} {
		expect(t, res[i], allowed)
	}
}

func TestAllViewKeepsReadOnlyPathsReadOnly(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	base := tempDir(t)
	ro := filepath.Join(base, "cgroup")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ro, "cgroup.procs"), "1\n")
	spec := allSpec(t, nil, "read:"+filepath.Join(ro, "cgroup.procs"), "append:"+filepath.Join(ro, "cgroup.procs"), "write:"+filepath.Join(ro, "new"))
	spec.RO = []string{ro}
	res := probeResults(t, spec)
	expect(t, res[0], true)
	expect(t, res[1], false)
	expect(t, res[2], false)
}

func TestScopeSignalsRefusesSignalsOutsideTheDomain(t *testing.T) {
	requireLandlock(t)
	if ABI() < 6 {
		t.Skipf("Landlock ABI %d has no signal scoping (ABI 6)", ABI())
	}
	t.Parallel()
	victim := exec.Command("sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	pid := strconv.Itoa(victim.Process.Pid)
	spec := allSpec(t, nil, "kill:"+pid)
	spec.ScopeSignals = true
	expect(t, probeResults(t, spec)[0], false)
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the victim died: %v", err)
	}
	// Without the scope the same probe kills it: the refusal was Landlock's.
	spec.ScopeSignals = false
	expect(t, probeResults(t, spec)[0], true)
}

// TestInitEndsItsWholeNamespace runs the shim as the init of a new user and
// PID namespace, as the supervisor does without cgroups: a grandchild that
// called setsid, cleared its environment and ignores SIGTERM dies with the
// namespace once the agent's command ends, and the init reports the
// command's own status on the status descriptor.
func TestInitEndsItsWholeNamespace(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	mark := "300.0" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	script := `setsid env -i /bin/sh -c 'trap "" TERM; exec sleep ` + mark + `' </dev/null >/dev/null 2>&1 &
while ! grep -q ` + mark + ` /proc/*/cmdline 2>/dev/null; do :; done
exit 7`
	spec := allSpec(t, nil)
	spec.Argv = []string{"/bin/sh", "-c", script}
	spec.Init = true
	args, err := Args(spec)
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testExe(t), append([]string{"shim"}, args...)...)
	cmd.Env = append(os.Environ(), helperEnv+"=1", StatusFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
	}
	err = cmd.Run()
	w.Close()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Fatalf("init: %v, want exit status 7; stderr: %s", err, stderr.String())
	}
	var b [4]byte
	if n, _ := r.Read(b[:]); n != 4 {
		t.Fatalf("status descriptor: %d bytes, want 4", n)
	}
	if ws := syscall.WaitStatus(binary.LittleEndian.Uint32(b[:])); !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("status descriptor says %#x, want exit 7", uint32(ws))
	}
	// The kernel killed the namespace before the init's exit completed.
	if pids := proctest.WithArg(mark); len(pids) > 0 {
		t.Fatalf("grandchild %v outlived its namespace", pids)
	}
}
