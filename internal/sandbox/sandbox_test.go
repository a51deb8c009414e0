package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestROFolderCannotBeWrittenButCanBeRead(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	f := filepath.Join(dir, "f")
	writeFile(t, f, "hello\n")
	spec := baseSpec(t,
		"read:"+f, "list:"+dir,
		"write:"+filepath.Join(dir, "new"), "append:"+f, "write:"+f,
		"mkdir:"+filepath.Join(dir, "sub"), "remove:"+f)
	spec.RO = append(spec.RO, dir)
	res := probeResults(t, spec)
	if len(res) != 7 {
		t.Fatalf("got %d results, want 7: %+v", len(res), res)
	}
	expect(t, res[0], true)
	if res[0].N != len("hello\n") {
		t.Errorf("read %d bytes, want %d", res[0].N, len("hello\n"))
	}
	expect(t, res[1], true)
	for _, r := range res[2:] {
		expect(t, r, false)
	}
	if got := readFile(t, f); got != "hello\n" {
		t.Errorf("the ro file changed: %q", got)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Errorf("the ro folder has %d entries, want 1", len(es))
	}
}

func TestHiddenFolderCannotBeReadOrListed(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	granted, hidden := tempDir(t), tempDir(t)
	secret := filepath.Join(hidden, "secret")
	if err := os.WriteFile(secret, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ops := []string{"read:" + secret, "list:" + hidden, "write:" + filepath.Join(hidden, "new"), "exec:" + secret}
	spec := baseSpec(t, ops...)
	spec.RW = append(spec.RW, granted)
	for _, r := range probeResults(t, spec) {
		expect(t, r, false)
	}
	// The denial is Landlock's: without it the same probe (as root) reads.
	spec.Restrict = false
	res := probeResults(t, spec)
	expect(t, res[0], true)
	expect(t, res[1], true)
	expect(t, res[2], true)
	expect(t, res[3], true)
	if _, err := os.Stat(filepath.Join(hidden, "new")); err != nil {
		t.Errorf("unrestricted write: %v", err)
	}
}

func TestRWFolderAllowsCreateWriteRemove(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	old := filepath.Join(dir, "old")
	writeFile(t, old, "old\n")
	sub := filepath.Join(dir, "sub")
	spec := baseSpec(t,
		"write:"+filepath.Join(dir, "new"),
		"append:"+filepath.Join(dir, "new"),
		"read:"+filepath.Join(dir, "new"),
		"write:"+old,
		"mkdir:"+sub,
		"rename:"+filepath.Join(dir, "new")+"|"+filepath.Join(sub, "moved"),
		"list:"+sub,
		"remove:"+filepath.Join(sub, "moved"),
		"remove:"+sub,
		"remove:"+old,
	)
	spec.RW = append(spec.RW, dir)
	for _, r := range probeResults(t, spec) {
		expect(t, r, true)
	}
	if es, _ := os.ReadDir(dir); len(es) != 0 {
		t.Errorf("the rw folder should be empty again, has %v", es)
	}
}

func TestGrantedFileIsReadableButItsSiblingsAreNot(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	f, sibling := filepath.Join(dir, "granted"), filepath.Join(dir, "sibling")
	writeFile(t, f, "granted\n")
	writeFile(t, sibling, "sibling\n")
	// A rule on a file takes only file rights: ro's read_dir is dropped
	// (the kernel refuses it on a file), rw's make/remove rights too.
	spec := baseSpec(t, "read:"+f, "append:"+f, "read:"+sibling, "list:"+dir)
	spec.RO = append(spec.RO, f)
	res := probeResults(t, spec)
	expect(t, res[0], true)
	expect(t, res[1], false)
	expect(t, res[2], false)
	expect(t, res[3], false)

	spec = baseSpec(t, "append:"+f, "write:"+sibling, "remove:"+f)
	spec.RW = append(spec.RW, f)
	res = probeResults(t, spec)
	expect(t, res[0], true)
	expect(t, res[1], false)
	expect(t, res[2], false)
}

func TestNestedShimCannotRegainLostAccess(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	exe := testExe(t)
	for _, tc := range []struct {
		name  string
		inner func(dir string) Spec
	}{
		{"asking rw on the ro folder", func(dir string) Spec {
			s := baseSpec(t)
			s.RW = append(s.RW, dir)
			return s
		}},
		{"asking for no Landlock at all", func(dir string) Spec {
			return Spec{Restrict: false}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			f := filepath.Join(dir, "f")
			writeFile(t, f, "ro\n")
			inner := tc.inner(dir)
			inner.Argv = []string{exe, "probe", "read:" + f, "write:" + filepath.Join(dir, "new"), "append:" + f}
			innerArgs, err := Args(inner)
			if err != nil {
				t.Fatal(err)
			}
			outer := baseSpec(t)
			outer.RO = append(outer.RO, dir)
			outer.Argv = append([]string{exe, "shim"}, innerArgs...)
			res := probeResults(t, outer)
			if len(res) != 3 {
				t.Fatalf("got %d results, want 3", len(res))
			}
			expect(t, res[0], true)
			expect(t, res[1], false)
			expect(t, res[2], false)
			if got := readFile(t, f); got != "ro\n" {
				t.Errorf("the ro file changed: %q", got)
			}
		})
	}
}

func TestDevNullIsWritableWithDefaultSystemRW(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	spec := baseSpec(t)
	spec.Argv = []string{"/bin/sh", "-c", "echo x >/dev/null && echo ok"}
	r := runShim(t, spec)
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("sh: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// os/exec opens /dev/null for a child's missing stdio: a Go agent
	// starting a child needs it granted.
	res := probeResults(t, baseSpec(t, "exec:/bin/true"))
	expect(t, res[0], true)

	spec = baseSpec(t, "exec:/bin/true")
	spec.RW = nil
	res = probeResults(t, spec)
	expect(t, res[0], false)
}

func TestShellRunsWithOnlyDefaultSystemRO(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	spec := Spec{
		Restrict: true,
		RO:       DefaultSystemRO(),
		Argv:     []string{"/bin/sh", "-c", "echo hi && /bin/true && head -c 5 /etc/passwd && echo && cat /proc/self/status | grep -c '^Pid'"},
	}
	r := runShim(t, spec)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "hi\n") || !strings.HasSuffix(r.stdout, "1\n") {
		t.Fatalf("sh: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestOpenFilesLimitMakesOpeningManyFilesFail(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	spec := baseSpec(t, "openmany:/etc/passwd|64")
	spec.OpenFiles = 16
	res := probeResults(t, spec)
	if res[0].OK || res[0].Errno != "EMFILE" || res[0].N >= 16 {
		t.Fatalf("opened %d files of 64 under open_files=16, then %q; want EMFILE before 16", res[0].N, res[0].Err)
	}
	// Without the limit, the same probe opens all 64.
	res = probeResults(t, baseSpec(t, "openmany:/etc/passwd|64"))
	if !res[0].OK || res[0].N != 64 {
		t.Fatalf("without a limit: opened %d, %q", res[0].N, res[0].Err)
	}
}

func TestCPUAndMemoryLimitsVisibleInProcSelfLimits(t *testing.T) {
	t.Parallel()
	for _, restrict := range []bool{true, false} {
		t.Run("restrict="+strconv.FormatBool(restrict), func(t *testing.T) {
			if restrict {
				requireLandlock(t)
			}
			// 300 MiB of address space is far less than the Go shim has
			// mapped: it must still reach exec.
			spec := Spec{
				Restrict:    restrict,
				RO:          DefaultSystemRO(),
				CPUSeconds:  37,
				MemoryBytes: 300 << 20,
				OpenFiles:   48,
				Argv:        []string{"cat", "/proc/self/limits"},
			}
			r := runShim(t, spec)
			if r.code != 0 {
				t.Fatalf("cat: exit %d, stderr %q", r.code, r.stderr)
			}
			limits := parseLimits(t, r.stdout)
			for name, want := range map[string]string{
				"Max cpu time":      "37",
				"Max address space": strconv.Itoa(300 << 20),
				"Max open files":    "48",
			} {
				if got := limits[name]; got != [2]string{want, want} {
					t.Errorf("%s: soft, hard = %v, want %s both", name, got, want)
				}
			}
		})
	}
}

// TestInheritOpenFilesIsTheCommandsLimit: the daemon raised its own
// RLIMIT_NOFILE and hands the one it started with to the shim, which gives
// it to the command, soft and hard apart; the budget's OpenFiles wins.
func TestInheritOpenFilesIsTheCommandsLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		openFiles  int64
		soft, hard string
	}{{0, "100", "200"}, {48, "48", "48"}} {
		spec := Spec{
			InheritOpenFiles: &OpenFilesLimit{Soft: 100, Hard: 200},
			OpenFiles:        tc.openFiles,
			Argv:             []string{"cat", "/proc/self/limits"},
		}
		r := runShim(t, spec)
		if r.code != 0 {
			t.Fatalf("cat: exit %d, stderr %q", r.code, r.stderr)
		}
		if got := parseLimits(t, r.stdout)["Max open files"]; got != [2]string{tc.soft, tc.hard} {
			t.Errorf("open files %d, inherited 100:200: the command's limit is %v, want %s:%s", tc.openFiles, got, tc.soft, tc.hard)
		}
	}
}

// parseLimits reads /proc/self/limits: name -> soft, hard.
func parseLimits(t *testing.T, s string) map[string][2]string {
	out := parseLimitsOf(s)
	if len(out) == 0 {
		t.Fatalf("no limits in %q", s)
	}
	return out
}

func TestGrantedSymlinkIsRefused(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		rw   bool
		path func(real, link string) string
	}{
		{"rw folder that is a link", true, func(real, link string) string { return link }},
		{"rw folder under a link", true, func(real, link string) string { return filepath.Join(link, "sub") }},
		{"ro file that is a link", false, func(real, link string) string { return filepath.Join(link, "sub", "file") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			real, link := filepath.Join(dir, "real"), filepath.Join(dir, "link")
			if err := os.MkdirAll(filepath.Join(real, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(real, "sub", "file"), "x")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			marker := filepath.Join(real, "marker")
			p := tc.path(real, link)
			spec := baseSpec(t, "write:"+marker)
			if tc.rw {
				spec.RW = append(spec.RW, p)
			} else {
				spec.RO = append(spec.RO, p)
			}
			r := runShim(t, spec)
			oneLineFailure(t, r, ExitCannotRun, "path "+strconv.Quote(p), "symbolic link", "resolves to")
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the agent ran")
			}
		})
	}
}

func TestMissingGrantedPathIsSkipped(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	dir := tempDir(t)
	spec := baseSpec(t, "list:"+dir)
	spec.RW = append(spec.RW, filepath.Join(dir, "missing"), "/nonexistent/kin/path")
	spec.RO = append(spec.RO, filepath.Join(dir, "also-missing"))
	res := probeResults(t, spec)
	expect(t, res[0], false)
}

func TestUnixSocketConnectFollowsGrants(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	rw, ro, hidden := tempDir(t), tempDir(t), tempDir(t)
	var socks []string
	for _, d := range []string{rw, ro, hidden} {
		p := filepath.Join(d, "s.sock")
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		socks = append(socks, p)
	}
	spec := baseSpec(t, "connect:"+socks[0], "connect:"+socks[1], "connect:"+socks[2])
	spec.RW = append(spec.RW, rw)
	spec.RO = append(spec.RO, ro)
	res := probeResults(t, spec)
	expect(t, res[0], true)
	expect(t, res[1], true)
	if ABI() >= 9 {
		expect(t, res[2], false)
	} else {
		// Before ABI 9 Landlock does not restrict connecting to a
		// pathname socket: a socket in a hidden folder stays reachable.
		expect(t, res[2], true)
		t.Logf("Landlock ABI %d < 9: connecting to a unix socket in a hidden folder is allowed by the kernel", ABI())
	}
}

func TestUngrantedCommandFailsWith126(t *testing.T) {
	requireLandlock(t)
	t.Parallel()
	spec := baseSpec(t)
	spec.RO = DefaultSystemRO() // not the test binary
	r := runShim(t, spec)
	oneLineFailure(t, r, ExitCannotRun, "exec ", "permission denied", "Landlock")
}

func TestCommandNotFoundExits127(t *testing.T) {
	t.Parallel()
	for _, argv0 := range []string{"kin-no-such-command", "/nonexistent/kin-no-such-command"} {
		for _, restrict := range []bool{true, false} {
			if restrict && ABI() == 0 {
				continue
			}
			spec := Spec{Restrict: restrict, RO: DefaultSystemRO(), Argv: []string{argv0, "arg"}}
			r := runShim(t, spec)
			oneLineFailure(t, r, ExitNotFound, "command not found", strconv.Quote(argv0))
		}
	}
}

func TestBadArgsFailClearlyWith126(t *testing.T) {
	t.Parallel()
	valid, err := Args(Spec{Argv: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want --spec JSON"},
		{[]string{"--help"}, "want --spec JSON"},
		{[]string{"--spec"}, "want --spec JSON"},
		{[]string{"--spec", ""}, "bad spec"},
		{[]string{"--spec", "{"}, "bad spec"},
		{[]string{"--spec", "[]"}, "bad spec"},
		{[]string{"--spec", "null"}, "argv is empty"},
		{[]string{"--spec", `{"argv":[]}`}, "argv is empty"},
		{[]string{"--spec", `{"argv":[""]}`}, "argv[0] is empty"},
		{[]string{"--spec", `{"argv":["/bin/true"],"rw":["relative/dir"]}`}, "not absolute"},
		{[]string{"--spec", `{"argv":["/bin/true"],"ro":["/tmp/../etc"]}`}, "not clean"},
		{[]string{"--spec", `{"argv":["/bin/true"],"ro":["/tmp/"]}`}, "not clean"},
		{[]string{"--spec", `{"argv":["/bin/true"],"rw":["/a\u0000b"]}`}, "NUL"},
		{[]string{"--spec", `{"argv":["/bin/true\u0000"]}`}, "NUL"},
		{[]string{"--spec", `{"argv":["/bin/true"],"mounts":{"/":"rw"}}`}, "unknown field"},
		{[]string{"--spec", `{"argv":["/bin/true"],"OpenFiles":-1}`}, "negative"},
		{[]string{"--spec", `{"argv":["/bin/true"],"OpenFiles":"16"}`}, "bad spec"},
		{[]string{"--spec", `{"argv":["/bin/true"],"inherit_open_files":{"soft":20,"hard":10}}`}, "want 0 < soft <= hard"},
		{[]string{"--spec", `{"argv":["/bin/true"],"inherit_open_files":{"hard":10}}`}, "want 0 < soft <= hard"},
		{[]string{"--spec", `{"argv":["/bin/true"]} {}`}, "more than one"},
		{[]string{"--spec", `{"argv":["/bin/true"],"rw":["/tmp"],"ro":["/tmp/x"]}`}, "inside rw path"},
		{append(valid, "extra"), "3 argument(s)"},
		{[]string{"--spec", "{\"argv\":\n[]}"}, "argv is empty"},
	} {
		r := runShimArgs(t, tc.args)
		oneLineFailure(t, r, ExitCannotRun, tc.want)
	}
}

func TestArgsRoundTripsAndRejectsWhatMainRejects(t *testing.T) {
	spec := Spec{
		RW: []string{"/tmp/session"}, RO: []string{"/usr", "/tmp/session-ro"},
		Restrict: true, BestEffort: true, CPUSeconds: 1, MemoryBytes: 2, OpenFiles: 3,
		Argv: []string{"python3", "-c", "print('--spec')", ""},
	}
	args, err := Args(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 2 || args[0] != "--spec" {
		t.Fatalf("Args = %q", args)
	}
	got, err := parseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustJSON(t, got), mustJSON(t, spec); a != b {
		t.Errorf("round trip: %s != %s", a, b)
	}
	if _, err := parseArgs([]string{"--spec=" + args[1]}); err != nil {
		t.Errorf("--spec=JSON: %v", err)
	}
	for _, bad := range []Spec{
		{},
		{Argv: []string{""}},
		{Argv: []string{"x"}, RW: []string{"rel"}},
		{Argv: []string{"x"}, RO: []string{"/a/"}},
		{Argv: []string{"x"}, RW: []string{"/"}, RO: []string{"/usr"}},
		{Argv: []string{"x"}, MemoryBytes: -1},
		{Argv: []string{"x"}, RO: []string{strings.Repeat("/a", maxArgLen)}},
	} {
		if args, err := Args(bad); err == nil {
			t.Errorf("Args(%+v) = %q, want an error", bad, args)
		}
	}
}

func TestLandlockUnavailableRefusesUnlessBestEffort(t *testing.T) {
	t.Parallel()
	spec := Spec{Restrict: true, RO: []string{"/usr"}, Argv: []string{"/bin/true"}}
	var stderr bytes.Buffer
	_, code, err := prepare(&spec, 0, &stderr)
	if err == nil || code != ExitCannotRun || !strings.Contains(err.Error(), "landlock:") || !strings.Contains(err.Error(), "best effort") {
		t.Errorf("without Landlock nor best effort: code %d, err %v; want 126 naming landlock and best effort", code, err)
	}

	spec.BestEffort = true
	p, _, err := prepare(&spec, 0, &stderr)
	if err != nil || p.abi != 0 || len(p.rules) != 0 {
		t.Fatalf("best effort: err %v, plan %+v; want an unrestricted plan", err, p)
	}
	if want := "kin sandbox: " + WarningUnrestricted + "\n"; stderr.String() != want {
		t.Errorf("warning %q, want %q", stderr.String(), want)
	}

	stderr.Reset()
	spec.Restrict = false
	if p, _, err := prepare(&spec, 0, &stderr); err != nil || p.abi != 0 || stderr.Len() != 0 {
		t.Errorf("no mounts: err %v, stderr %q; want a quiet unrestricted plan", err, stderr.String())
	}
}

func TestDefaultSystemPathsAreCanonicalAndExist(t *testing.T) {
	t.Parallel()
	ro, rw := DefaultSystemRO(), DefaultSystemRW()
	for _, p := range append(append([]string{}, ro...), rw...) {
		if real, err := filepath.EvalSymlinks(p); err != nil || real != p {
			t.Errorf("%s: resolves to %q, %v", p, real, err)
		}
	}
	for _, want := range []string{"/usr", "/etc", "/proc"} {
		if !contains(ro, want) {
			t.Errorf("DefaultSystemRO() = %q, lacks %s", ro, want)
		}
	}
	if !contains(rw, "/dev/null") {
		t.Errorf("DefaultSystemRW() = %q, lacks /dev/null", rw)
	}
	if _, err := Args(Spec{Restrict: true, RO: ro, RW: rw, Argv: []string{"true"}}); err != nil {
		t.Errorf("the defaults together: %v", err)
	}
	t.Logf("DefaultSystemRO: %q; DefaultSystemRW: %q; Landlock ABI %d", ro, rw, ABI())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestAddressSpaceLimitBelowTheShimsMapsStillExecs: the shim sets
// RLIMIT_AS far below what its own Go runtime has mapped, so nothing may
// allocate between that limit and the exec. Go's syscall.Exec did (the C
// strings of a large environment): a fifth of such starts died with
// "fatal error: runtime: out of memory" before the command ran.
func TestAddressSpaceLimitBelowTheShimsMapsStillExecs(t *testing.T) {
	t.Parallel()
	const memory = 16 << 20
	args, err := Args(Spec{MemoryBytes: memory, OpenFiles: 48, Argv: []string{"cat", "/proc/self/limits"}})
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), helperEnv+"=1", "KIN_TEST_BIG="+strings.Repeat("x", 120_000))
	for i := range 200 {
		env = append(env, fmt.Sprintf("KIN_TEST_V%d=%s", i, strings.Repeat("y", 500)))
	}
	want := strconv.Itoa(memory)
	shimMany(t, args, env, 64, func(r run) string {
		if as := parseLimitsOf(r.stdout)["Max address space"]; r.code != 0 || as != [2]string{want, want} {
			return fmt.Sprintf("cat under RLIMIT_AS %s: exit %d, address space %v", want, r.code, as)
		}
		return ""
	})
}

// TestFailedExecUnderAddressSpaceLimitSaysWhy: once the limits are set
// nothing may allocate, the exec's failure included: the shim still says
// in one line why the command did not start, with its status (a missing
// interpreter 127, a file the kernel cannot run 126), never a crash of its
// runtime. Before, a few starts in a hundred died with "fatal error".
func TestFailedExecUnderAddressSpaceLimitSaysWhy(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	noInterp := filepath.Join(dir, "no-interpreter")
	writeFile(t, noInterp, "#!/nonexistent/interpreter\n")
	garbage := filepath.Join(dir, "not-a-program")
	writeFile(t, garbage, strings.Repeat("\x7fELF not really", 64))
	for _, f := range []string{noInterp, garbage} {
		if err := os.Chmod(f, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path string
		code int
		why  string
	}{{noInterp, ExitNotFound, "no such file or directory (a script's interpreter may be missing)"}, {garbage, ExitCannotRun, "exec format error"}} {
		args, err := Args(Spec{MemoryBytes: 16 << 20, OpenFiles: 48, Argv: []string{tc.path}})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("kin sandbox: exec %s: %s\n", quote(tc.path), tc.why)
		shimMany(t, args, append(os.Environ(), helperEnv+"=1"), 120, func(r run) string {
			if r.code != tc.code || r.stderr != want {
				return fmt.Sprintf("%s: exit %d, want %d and %q", filepath.Base(tc.path), r.code, tc.code, want)
			}
			return ""
		})
	}
}

// TestCommandGetsTheOpenFilesLimitTheShimStartedWith: Go's runtime raises
// the shim's soft RLIMIT_NOFILE at start; where the spec names no open
// files limit, the command gets the one the shim was started with, soft
// and hard, restricted by Landlock or not.
func TestCommandGetsTheOpenFilesLimitTheShimStartedWith(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		memory   int64
		restrict bool
	}{{0, false}, {256 << 20, false}, {0, true}, {256 << 20, true}} {
		if tc.restrict {
			requireLandlock(t)
		}
		spec := Spec{MemoryBytes: tc.memory, Argv: []string{"cat", "/proc/self/limits"}}
		if tc.restrict {
			spec.Restrict, spec.RO = true, DefaultSystemRO()
		}
		args, err := Args(spec)
		if err != nil {
			t.Fatal(err)
		}
		script := `ulimit -Sn 321 && ulimit -Hn 4000 && exec "$0" shim "$@"`
		cmd := exec.Command("/bin/sh", append([]string{"-c", script, testExe(t)}, args...)...)
		cmd.Env = append(os.Environ(), helperEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%+v: %v; stderr %q", tc, err, stderr.String())
		}
		if got := parseLimitsOf(string(out))["Max open files"]; got != [2]string{"321", "4000"} {
			t.Errorf("%+v: the command's open files limit is %v, want 321 4000, the shim's at start", tc, got)
		}
	}
}

// parseLimitsOf is parseLimits without a test to fail: empty where s holds
// no limits.
func parseLimitsOf(s string) map[string][2]string {
	out := map[string][2]string{}
	for _, line := range strings.Split(s, "\n")[1:] {
		if len(line) < 26 {
			continue
		}
		if f := strings.Fields(line[25:]); len(f) >= 2 {
			out[strings.TrimSpace(line[:25])] = [2]string{f[0], f[1]}
		}
	}
	return out
}

// shimMany runs the shim with args and env n times from four goroutines,
// and fails the test for each run that check says (a non-empty text) went
// wrong, showing the first three with the start of their stderr.
func shimMany(t *testing.T, args, env []string, n int, check func(run) string) {
	t.Helper()
	exe := testExe(t)
	var failed atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n / 4 {
				cmd := exec.Command(exe, append([]string{"shim"}, args...)...)
				cmd.Env = env
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				r := run{stdout: stdout.String(), stderr: stderr.String(), code: -1}
				var ee *exec.ExitError
				switch {
				case err == nil:
					r.code = 0
				case errors.As(err, &ee):
					r.code = ee.ExitCode()
				}
				if what := check(r); what != "" && failed.Add(1) <= 3 {
					t.Errorf("%s; stderr %q", what, firstLines(r.stderr, 3))
				}
			}
		})
	}
	wg.Wait()
	if k := failed.Load(); k > 0 {
		t.Errorf("%d of %d starts went wrong", k, n/4*4)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
