package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// noEnv is an empty environment, so that the caller's KIN_* do not leak in.
func noEnv(string) string { return "" }

// startServe runs `kin serve` with args until the returned stop is called;
// stop cancels its context and returns its exit status.
func startServe(t *testing.T, env Env, home string, args ...string) (stop func() int, stdout, stderr *syncBuffer) {
	t.Helper()
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
	for _, want := range []string{filepath.Join(home, "kin.sock"), "http://" + st.HTTP, filepath.Join(home, "operator.token"), "profile default", "sqlite:" + filepath.Join(home, "kin.db")} {
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
		info.TokenFile != filepath.Join(home, "operator.token") || info.Home != home {
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
	if cfg.Home != "/flag/home" || cfg.HTTPAddr != "off" || cfg.Profile != "hierarchy" || cfg.Store != "sqlite" {
		t.Errorf("flags: %+v", cfg)
	}
}

func TestServeErrors(t *testing.T) {
	home := kintest.TempHome(t)
	serve := func(getenv func(string) string, args ...string) result {
		var out, errb syncBuffer
		// A cancelled context: a run that got through the checks would stop at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		code := Env{Stdout: &out, Stderr: &errb, Getenv: getenv}.Run(ctx, append([]string{"serve", "--home", home}, args...))
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
	wantUsage(t, serve(noEnv, "--http", "nowhere"), "--http", "nowhere")
	wantUsage(t, serve(noEnv, "--profile", "no-such-profile"), "--profile", "no-such-profile", "aauth, default, hierarchy")
	wantUsage(t, serve(noEnv, "--profile", "/no/such/file.json"), "--profile")
	wantUsage(t, serve(noEnv, "--store", "mysql://x"), "--store")
	wantUsage(t, serve(noEnv, "--bogus"), "--bogus")
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
