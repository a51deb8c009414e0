package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// noEnv is an empty environment, so that the caller's KIN_* do not leak in.
func noEnv(string) string { return "" }

// ownUIDRangeDir gives a daemon started with getenv a host uid allocation
// directory of the test's own (KIN_UID_RANGE_DIR) unless getenv names one,
// so that tests never write the host's /var/lib/kin.
func ownUIDRangeDir(t *testing.T, getenv func(string) string) func(string) string {
	dir := t.TempDir()
	return func(k string) string {
		if v := getenv(k); v != "" || k != "KIN_UID_RANGE_DIR" {
			return v
		}
		return dir
	}
}

// startServe runs `kin serve` with args until the returned stop is called;
// stop cancels its context and returns its exit status.
func startServe(t *testing.T, env Env, home string, args ...string) (stop func() int, stdout, stderr *syncBuffer) {
	t.Helper()
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	env.Getenv = ownUIDRangeDir(t, env.Getenv)
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	env.Stdout, env.Stderr = stdout, stderr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- env.Run(ctx, append([]string{"serve", "--home", home}, args...)) }()
	stopped := false
	stop = func() int {
		t.Helper()
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("kin serve did not return after its context was cancelled")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	kintest.WaitFor(t, 30*time.Second, "kin serve to listen", func() bool {
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("kin serve exited %d early:\n%s", code, stderr.String())
		default:
		}
		_, err := os.Stat(filepath.Join(home, daemon.SocketName))
		// The line is printed once Start has returned: the socket alone
		// appears while the daemon is still starting.
		started := strings.Contains(stderr.String(), "kin serve: listening") || strings.Contains(stdout.String(), `"socket"`)
		return err == nil && started
	})
	return stop, stdout, stderr
}

func TestServe(t *testing.T) {
	home := kintest.TempHome(t)
	stop, stdout, stderr := startServe(t, Env{Getenv: noEnv}, home, "--http", "127.0.0.1:0")

	r := runCLI(t, "status", "--home", home, "--json")
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.Home != home || st.Socket != filepath.Join(home, "kin.sock") || st.HTTP == "" || st.Profile != "default" {
		t.Errorf("status = %+v", st)
	}
	wantOK(t, runCLI(t, "register", "--home", home, "--name", "root", "--responsible", "ops", "--json"))

	for name, mode := range map[string]os.FileMode{"kin.sock": 0o600, "operator.token": 0o600} {
		fi, err := os.Stat(filepath.Join(home, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %o, want %o", name, fi.Mode().Perm(), mode)
		}
	}
	line := ""
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "kin serve: listening") {
			line = l
		}
	}
	contained := "agents contained by " + containmentString(st.Containment, st.ContainmentReason)
	for _, want := range []string{filepath.Join(home, "kin.sock"), "http://" + st.HTTP, filepath.Join(home, "operator.token"), "profile default",
		"sqlite:" + filepath.Join(home, "kin.db"), contained, "(and stop every agent)"} {
		if !strings.Contains(line, want) {
			t.Errorf("listening line lacks %q: %q", want, line)
		}
	}
	if stdout.String() != "" {
		t.Errorf("stdout: %q", stdout.String())
	}

	if code := stop(); code != 0 {
		t.Fatalf("kin serve exited %d:\n%s", code, stderr.String())
	}
	// Every other stderr line is a JSON log record.
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l == line {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", l)
		}
	}
	if !strings.Contains(stderr.String(), `"msg":"kin serve stopped"`) {
		t.Errorf("no shutdown log:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"kin serve: stopping (no agent is running)"`) {
		t.Errorf("no stopping record saying what is stopped:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(home, "kin.sock")); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	// The store outlives the daemon: a restart sees the agent.
	stop, _, _ = startServe(t, Env{Getenv: noEnv}, home, "--http", "off")
	r = runCLI(t, "show", "1", "--home", home, "--json")
	wantOK(t, r)
	if code := stop(); code != 0 {
		t.Fatalf("second kin serve exited %d", code)
	}
}

func TestServeJSON(t *testing.T) {
	home := kintest.TempHome(t)
	getenv := func(k string) string {
		return map[string]string{"KIN_PROFILE": "hierarchy", "KIN_HTTP": "127.0.0.1:0"}[k]
	}
	stop, stdout, stderr := startServe(t, Env{Getenv: getenv}, home, "--http", "off", "--json")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	var info serveInfo
	decodeOne(t, stdout.String(), &info)
	if info.Socket != filepath.Join(home, "kin.sock") || info.HTTP != "" || info.Profile != "hierarchy" ||
		info.TokenFile != filepath.Join(home, "operator.token") || info.Home != home || info.LeaveRunning ||
		(info.Containment != "cgroup2" && info.Containment != "process-groups") || (info.Containment == "cgroup2") != (info.CgroupRoot != "") {
		t.Errorf("info = %+v", info)
	}
	if strings.Contains(stderr.String(), "kin serve: listening") {
		t.Errorf("--json printed the readable line:\n%s", stderr.String())
	}
}

func TestServeConfig(t *testing.T) {
	env := map[string]string{"KIN_HOME": "/env/home", "KIN_HTTP": "127.0.0.1:9", "KIN_PROFILE": "aauth", "KIN_STORE": "sqlite:/env/kin.db"}
	getenv := func(k string) string { return env[k] }

	cfg, err := serveConfig(noEnv, serveFlags{home: "/flag/home"})
	if err != nil {
		t.Fatal(err)
	}
	def := daemon.DefaultConfig()
	if cfg.Home != "/flag/home" || cfg.HTTPAddr != def.HTTPAddr || cfg.Profile != def.Profile || cfg.Store != def.Store {
		t.Errorf("defaults: %+v", cfg)
	}

	cfg, err = serveConfig(getenv, serveFlags{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Home != "/env/home" || cfg.HTTPAddr != "127.0.0.1:9" || cfg.Profile != "aauth" || cfg.Store != "sqlite:/env/kin.db" {
		t.Errorf("env: %+v", cfg)
	}

	cfg, err = serveConfig(getenv, serveFlags{home: "/flag/home", http: "off", profile: "hierarchy", store: "sqlite"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ctx != "" {
		t.Errorf("ctx defaults to %q, want \"\" (<home>/ctx)", cfg.Ctx)
	}
	if cfg, err := serveConfig(func(k string) string { return map[string]string{"KIN_CTX": "/env/ctx"}[k] }, serveFlags{}); err != nil || cfg.Ctx != "/env/ctx" {
		t.Errorf("KIN_CTX: %q, %v", cfg.Ctx, err)
	}
	if cfg, err := serveConfig(func(k string) string { return map[string]string{"KIN_CTX": "/env/ctx"}[k] }, serveFlags{ctx: "/ctx"}); err != nil || cfg.Ctx != "/ctx" {
		t.Errorf("--ctx: %q, %v", cfg.Ctx, err)
	}
	if cfg.Home != "/flag/home" || cfg.HTTPAddr != "off" || cfg.Profile != "hierarchy" || cfg.Store != "sqlite" {
		t.Errorf("flags: %+v", cfg)
	}

	// Containment and leave-running: "auto" is the daemon's "".
	for _, c := range []struct {
		env          map[string]string
		fl           serveFlags
		containment  string
		leaveRunning bool
	}{
		{nil, serveFlags{}, "", false},
		{map[string]string{"KIN_CONTAINMENT": "process-groups", "KIN_LEAVE_RUNNING": "1"}, serveFlags{}, "process-groups", true},
		{map[string]string{"KIN_CONTAINMENT": "process-groups", "KIN_LEAVE_RUNNING": "true"}, serveFlags{containment: "auto", leaveRunning: "false"}, "", false},
		{nil, serveFlags{containment: "cgroup2", leaveRunning: "true"}, "cgroup2", true},
	} {
		cfg, err := serveConfig(func(k string) string { return c.env[k] }, c.fl)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Containment != c.containment || cfg.LeaveRunning != c.leaveRunning {
			t.Errorf("env %v, flags %+v: containment %q, leave running %v", c.env, c.fl, cfg.Containment, cfg.LeaveRunning)
		}
	}

	// Shutdown timeout: the daemon's default unless set; the flag wins.
	for _, c := range []struct {
		env  map[string]string
		fl   serveFlags
		want time.Duration
	}{
		{nil, serveFlags{}, 0},
		{map[string]string{"KIN_SHUTDOWN_TIMEOUT": "20s"}, serveFlags{}, 20 * time.Second},
		{map[string]string{"KIN_SHUTDOWN_TIMEOUT": "20s"}, serveFlags{shutdownTimeout: "85s"}, 85 * time.Second},
		{nil, serveFlags{shutdownTimeout: "1h"}, time.Hour},
	} {
		cfg, err := serveConfig(func(k string) string { return c.env[k] }, c.fl)
		if err != nil || cfg.ShutdownTimeout != c.want {
			t.Errorf("env %v, flags %+v: shutdown timeout %v, %v; want %v", c.env, c.fl, cfg.ShutdownTimeout, err, c.want)
		}
	}
}

// TestServeFenceConfig: --host-lease, --fence-after and --fence-mode (and
// their KIN_ variables) reach the daemon's config; a fence-after not longer
// than the lease, a duration out of range or an unknown mode is refused,
// naming the setting.
func TestServeFenceConfig(t *testing.T) {
	cfg, err := serveConfig(func(k string) string {
		return map[string]string{"KIN_HOST_LEASE": "3s", "KIN_FENCE_AFTER": "5s", "KIN_FENCE_MODE": "freeze"}[k]
	}, serveFlags{home: "/h"})
	if err != nil || cfg.HostLease != 3*time.Second || cfg.FenceAfter != 5*time.Second || cfg.FenceMode != "freeze" {
		t.Fatalf("env: lease %v, fence after %v, mode %q, %v", cfg.HostLease, cfg.FenceAfter, cfg.FenceMode, err)
	}
	cfg, err = serveConfig(noEnv, serveFlags{home: "/h", hostLease: "2s", fenceAfter: "7s", fenceMode: "stop"})
	if err != nil || cfg.HostLease != 2*time.Second || cfg.FenceAfter != 7*time.Second || cfg.FenceMode != "stop" {
		t.Fatalf("flags: lease %v, fence after %v, mode %q, %v", cfg.HostLease, cfg.FenceAfter, cfg.FenceMode, err)
	}
	for _, c := range []struct {
		fl   serveFlags
		want string
	}{
		{serveFlags{hostLease: "3s", fenceAfter: "3s"}, "--fence-after \"3s\": fence-after 3s must be longer than the host lease 3s"},
		{serveFlags{fenceAfter: "10s"}, "must be longer than the host lease 15s"},
		{serveFlags{hostLease: "100ms"}, "--host-lease \"100ms\": not a duration from 1s to 1h"},
		{serveFlags{fenceAfter: "soon"}, "--fence-after \"soon\": not a duration"},
		{serveFlags{fenceMode: "pause"}, "--fence-mode \"pause\": not stop or freeze"},
	} {
		c.fl.home = "/h"
		if _, err := serveConfig(noEnv, c.fl); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.fl, err, c.want)
		}
	}
	if _, err := serveConfig(func(k string) string { return map[string]string{"KIN_FENCE_MODE": "nap"}[k] }, serveFlags{home: "/h"}); err == nil ||
		!strings.Contains(err.Error(), `KIN_FENCE_MODE="nap"`) {
		t.Errorf("KIN_FENCE_MODE=nap: %v", err)
	}
}

func TestServeErrors(t *testing.T) {
	home := kintest.TempHome(t)
	serve := func(getenv func(string) string, args ...string) result {
		var out, errb syncBuffer
		// A cancelled context: a run that got through the checks would stop at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code := Env{Stdout: &out, Stderr: &errb, Getenv: ownUIDRangeDir(t, getenv)}.Run(ctx, append([]string{"serve", "--home", home}, args...))
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	wantUsage(t, serve(noEnv, "--http", "nowhere"), "--http", "nowhere")
	wantUsage(t, serve(noEnv, "--profile", "no-such-profile"), "--profile", "no-such-profile", "aauth, default, hierarchy")
	wantUsage(t, serve(noEnv, "--profile", "/no/such/file.json"), "--profile")
	wantUsage(t, serve(noEnv, "--store", "mysql://x"), "--store")
	pg := serve(noEnv, "--store", "postgres://kin:hunter2@db:notaport/kin")
	wantUsage(t, pg, "--store", "not a PostgreSQL URL", "postgres://***@db:notaport/kin")
	if strings.Contains(pg.stderr, "hunter2") {
		t.Errorf("the error shows the store's password:\n%s", pg.stderr)
	}
	wantUsage(t, serve(noEnv, "--store", "/data/kin.db"), "--store", "no scheme", "sqlite:/data/kin.db")
	wantUsage(t, serve(noEnv, "--ctx", "relative/ctx"), "--ctx", "not an absolute path")
	wantUsage(t, serve(noEnv, "--bogus"), "--bogus")
	wantUsage(t, serve(noEnv, "--containment", "jail"), "--containment", "jail", "auto, cgroup2, pid-namespaces, process-groups")
	wantUsage(t, serve(noEnv, "--leave-running=maybe"), "--leave-running")
	for _, bad := range []string{"soon", "0s", "500ms", "-5s", "2h"} {
		wantUsage(t, serve(noEnv, "--shutdown-timeout", bad), "--shutdown-timeout", bad, "not a duration from 1s to 1h0m0s")
	}
	wantUsage(t, serve(noEnv, "--uid-range", "300000"), "--uid-range", "300000")
	if os.Geteuid() == 0 {
		wantUsage(t, serve(noEnv, "--uid-range", "5:10"), "--uid-range", "start must be at least 1000")
	}
	for _, bad := range []map[string]string{{"KIN_CONTAINMENT": "jail"}, {"KIN_LEAVE_RUNNING": "maybe"}, {"KIN_SHUTDOWN_TIMEOUT": "forever"}, {"KIN_UID_RANGE": "x:y"}, {"KIN_UID_RANGE_DIR": "relative"}} {
		var name string
		for name = range bad {
		}
		msg := wantError(t, serve(func(k string) string { return bad[k] }, "--json"), kin.ECodeInvalid)
		if !strings.Contains(msg, name) {
			t.Errorf("message %q does not name %s", msg, name)
		}
	}
	wantUsage(t, serve(noEnv, "extra"), "extra")

	badEnv := func(k string) string { return map[string]string{"KIN_PROFILE": "no-such-profile"}[k] }
	msg := wantError(t, serve(badEnv, "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "KIN_PROFILE") {
		t.Errorf("message %q does not name KIN_PROFILE", msg)
	}
	// A flag overrides a bad environment.
	stop, _, stderr := startServe(t, Env{Getenv: badEnv}, home, "--profile", "default", "--http", "off")
	if code := stop(); code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}

	d := kintest.StartDaemon(t)
	var out, errb syncBuffer
	code := Env{Stdout: &out, Stderr: &errb, Getenv: noEnv}.Run(context.Background(), []string{"serve", "--home", d.Home, "--http", "off", "--json"})
	if code != ExitError {
		t.Fatalf("second daemon on one home: exit %d", code)
	}
	last := strings.Split(strings.TrimSpace(errb.String()), "\n")
	var e kin.Error
	decodeOne(t, last[len(last)-1], &e)
	if !strings.Contains(e.Message, "already running") {
		t.Errorf("error = %+v", e)
	}
}

// TestServeContainment: --containment process-groups is in force and said
// so on the start-up line.
func TestServeContainment(t *testing.T) {
	home := kintest.TempHome(t)
	stop, _, stderr := startServe(t, Env{Getenv: noEnv}, home, "--http", "off", "--containment", "process-groups")
	r := runCLI(t, "status", "--home", home, "--json")
	wantOK(t, r)
	var st kin.DaemonStatus
	decodeOne(t, r.stdout, &st)
	if st.Containment != "process-groups" {
		t.Errorf("status = %+v", st)
	}
	if !strings.Contains(stderr.String(), "agents contained by "+containmentString(st.Containment, st.ContainmentReason)+";") {
		t.Errorf("the start-up line does not say process-groups:\n%s", stderr.String())
	}
	if st.Sandbox == "" || !strings.Contains(stderr.String(), "every agent sandboxed ("+st.Sandbox+")") {
		t.Errorf("status says sandbox %q; the start-up line does not show it:\n%s", st.Sandbox, stderr.String())
	}
	if n := len(st.Missing); n == 0 || !strings.Contains(stderr.String(), fmt.Sprintf("; %d guarantee(s) this host cannot give: see kin status", n)) {
		t.Errorf("the start-up line does not count the %d guarantees status lists as missing:\n%s", n, stderr.String())
	}
	if !slices.ContainsFunc(st.Missing, func(m string) bool { return strings.HasPrefix(m, "process-groups containment") }) {
		t.Errorf("status does not say what process-groups cannot give: %q", st.Missing)
	}
	if os.Geteuid() == 0 && (st.AgentUIDRange == "" || !strings.Contains(stderr.String(), "agents run as uids "+st.AgentUIDRange+" ")) {
		t.Errorf("status says agent uid range %q; the start-up line does not show it:\n%s", st.AgentUIDRange, stderr.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}

// TestServeLeaveRunning: with --leave-running a clean shutdown leaves the
// agents running, and the next kin serve on the home takes them back;
// without it, a shutdown stops them.
func TestServeLeaveRunning(t *testing.T) {
	home := kintest.TempHome(t)
	stop, _, stderr := startServe(t, Env{Getenv: noEnv}, home, "--http", "off", "--leave-running")
	if !strings.Contains(stderr.String(), "(agents keep running)") {
		t.Errorf("the start-up line does not say agents keep running:\n%s", stderr.String())
	}
	r := runCLI(t, "spawn", "--home", home, "--json", "--name", "survivor", "--responsible", "ops", "sleep", "600")
	wantOK(t, r)
	var a kin.Agent
	decodeOne(t, r.stdout, &a)
	t.Cleanup(func() {
		if t.Failed() { // it may be running still, with no daemon to stop it
			syscall.Kill(a.PID, syscall.SIGKILL)
		}
	})
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	if err := syscall.Kill(a.PID, 0); err != nil {
		t.Fatalf("agent %d (pid %d) did not survive the shutdown: %v", a.ID, a.PID, err)
	}

	stop, _, stderr = startServe(t, Env{Getenv: noEnv}, home, "--http", "off")
	r = runCLI(t, "show", "--home", home, "--json", a.ID.String())
	wantOK(t, r)
	var shown shownAgent
	decodeOne(t, r.stdout, &shown)
	if back := shown.Agent; !back.Running() || back.PID != a.PID {
		t.Fatalf("after the restart: %+v", shown.Agent)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	// Without --leave-running the shutdown stopped it. The pid is not
	// reused this fast in practice; waiting for it to go is the check.
	kintest.WaitFor(t, 30*time.Second, "the agent's process to end", func() bool {
		return syscall.Kill(a.PID, 0) != nil
	})
}

// TestServeLogFileAndStoppingLine: --log-file takes the daemon's JSON log
// off stderr (appending to the file), stderr keeps the start-up line, and
// stopping says what it stops and how long that may take.
func TestServeLogFileAndStoppingLine(t *testing.T) {
	home := kintest.TempHome(t)
	logFile := filepath.Join(t.TempDir(), "kin.log")
	stop, _, stderr := startServe(t, Env{Getenv: noEnv}, home, "--http", "off", "--log-file", logFile)
	r := runCLI(t, "spawn", "--home", home, "--json", "--name", "sleeper", "--responsible", "ops", "--grace", "2s", "sleep", "600")
	wantOK(t, r)
	if code := stop(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "kin serve: listening") ||
		lines[1] != "kin serve: stopping 1 running agent(s), every subtree at once: SIGTERM, then SIGKILL after each one's grace (up to 2s here), all within 1m0s (--shutdown-timeout), then the store is closed" {
		t.Errorf("stderr is %q; want the start-up line and the stopping line only", lines)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"msg":"kin serve started"`) || !strings.Contains(string(b), `"msg":"kin serve: stopping 1 running agent(s)`) {
		t.Errorf("the log file lacks the daemon's log:\n%s", b)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("log line is not JSON: %q", l)
		}
	}
	if st, err := os.Stat(logFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v (%v), want 0600", st.Mode(), err)
	}
	wantUsage(t, runCLI(t, "serve", "--home", kintest.TempHome(t), "--http", "off", "--log-file", "/no/such/dir/kin.log"), "--log-file", "/no/such/dir/kin.log")
}

// TestServeModelGatewayConfig: kin serve's model flags and their
// environment variables, every bad value named, and a key never taken
// from the command line nor shown in an error.
func TestServeModelGatewayConfig(t *testing.T) {
	home := kintest.TempHome(t)
	keyFile := filepath.Join(t.TempDir(), "openai.key")
	if err := os.WriteFile(keyFile, []byte("sk-file-key-123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg, err := serveConfig(env(map[string]string{"LOCAL_KEY": "sk-env-key-abcdef"}), serveFlags{home: home,
		modelUpstreams: []string{"openai=https://api.openai.com/v1", "local=http://127.0.0.1:8000"},
		modelAPIs:      []string{"local=anthropic"},
		modelKeys:      []string{"openai=@" + keyFile, "local=$LOCAL_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.ModelUpstreams) != 2 {
		t.Fatalf("upstreams %+v", cfg.ModelUpstreams)
	}
	o, l := cfg.ModelUpstreams[0], cfg.ModelUpstreams[1]
	if o.API != "openai" || o.URL.String() != "https://api.openai.com" || o.Key.Reveal() != "sk-file-key-123456" ||
		l.API != "anthropic" || l.Key.Reveal() != "sk-env-key-abcdef" {
		t.Fatalf("upstreams %+v %+v", o, l)
	}
	if s := fmt.Sprintf("%v %+v %#v", o, o, o.Key); strings.Contains(s, "sk-file") {
		t.Fatalf("a key printed: %s", s)
	}
	// The environment's lists.
	cfg, err = serveConfig(env(map[string]string{"KIN_MODEL_UPSTREAMS": "anthropic=https://api.anthropic.com, x=http://h:1",
		"KIN_MODEL_APIS": "x=openai", "KIN_MODEL_KEYS": "anthropic=$AK x=none", "AK": "sk-ant-0123456789"}), serveFlags{home: home})
	if err != nil || len(cfg.ModelUpstreams) != 2 || cfg.ModelUpstreams[1].Key.Reveal() != "" {
		t.Fatalf("from the environment: %+v, %v", cfg.ModelUpstreams, err)
	}

	serve := func(getenv func(string) string, args ...string) result {
		var out, errb syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code := Env{Stdout: &out, Stderr: &errb, Getenv: ownUIDRangeDir(t, getenv)}.Run(ctx, append([]string{"serve", "--home", home}, args...))
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--model-upstream", "openai=https://x", "--model-key", "openai=sk-literal-123456"}, []string{"--model-key", "on the command line"}},
		{[]string{"--model-upstream", "openai=ftp://x", "--model-key", "openai=none"}, []string{"--model-upstream", "not an http or https URL"}},
		{[]string{"--model-upstream", "openai=https://user:pw@x", "--model-key", "openai=none"}, []string{"user information"}},
		{[]string{"--model-upstream", "openai"}, []string{"not NAME=VALUE"}},
		{[]string{"--model-upstream", "Bad Name=http://x"}, []string{"upstream name"}},
		{[]string{"--model-upstream", "mine=http://x", "--model-key", "mine=none"}, []string{"--model-api mine=openai"}},
		{[]string{"--model-upstream", "openai=http://x"}, []string{"--model-key openai=@FILE"}},
		{[]string{"--model-upstream", "openai=http://x", "--model-key", "openai=@/no/such/key"}, []string{"model key openai", "/no/such/key"}},
		{[]string{"--model-upstream", "openai=http://x", "--model-key", "openai=$NO_SUCH_VAR"}, []string{"NO_SUCH_VAR is not set"}},
		{[]string{"--model-upstream", "openai=http://x", "--model-key", "other=none"}, []string{"no --model-upstream is named other"}},
		{[]string{"--model-upstream", "openai=http://x", "--model-api", "openai=gemini", "--model-key", "openai=none"}, []string{"not openai or anthropic"}},
		{[]string{"--model-upstream", "openai=http://x", "--model-upstream", "openai=http://y", "--model-key", "openai=none"}, []string{"given twice"}},
		{[]string{"--model-key", "openai=none"}, []string{"no --model-upstream"}},
	} {
		r := serve(noEnv, c.args...)
		wantUsage(t, r, c.want...)
		if strings.Contains(r.stderr, "sk-literal") {
			t.Errorf("%v: the error shows the key:\n%s", c.args, r.stderr)
		}
	}
	msg := wantError(t, serve(env(map[string]string{"KIN_MODEL_UPSTREAMS": "openai=http://x", "KIN_MODEL_KEYS": "openai=sk-literal-123456"}), "--json"), kin.ECodeInvalid)
	if !strings.Contains(msg, "KIN_MODEL_KEYS") || strings.Contains(msg, "sk-literal") {
		t.Errorf("message %q", msg)
	}
	var out, errb syncBuffer
	Env{Stdout: &out, Stderr: &errb, Getenv: noEnv}.Run(context.Background(), []string{"serve", "--help"})
	for _, want := range []string{"--model-upstream NAME=URL", "--model-key", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "KIN_MODEL_UPSTREAMS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("kin serve --help lacks %q", want)
		}
	}
}
