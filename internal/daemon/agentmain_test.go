package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/sandbox"
	"github.com/kin-agents/kin/kin"
)

// TestMain lets the test binary be a daemon process (so tests can kill -9
// a real daemon) or an agent program (so agents are real processes that
// talk to kin through their own socket), chosen by the environment.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	if home := os.Getenv("KIN_TEST_DAEMON_HOME"); home != "" {
		runDaemonProcess(home)
		return
	}
	if spec := os.Getenv("KIN_TEST_FAKEMODELS"); spec != "" {
		os.Exit(runApartUpstreams(spec)) // BenchmarkGateway's -apart upstreams
	}
	if mode := os.Getenv("KINTEST_MODE"); mode != "" {
		os.Exit(runAgent(mode))
	}
	code := pgtest.Main(m) // KIN_TEST_STORE=postgres: the test binary's PostgreSQL cluster
	kintest.RemoveAgentBinary()
	os.Exit(code)
}

// daemonProcessEnv is the environment of a daemon process on home (its
// agents start through the embedded lean shim, as a kin binary's do), on
// the store kintest.StartDaemon would give home ($KIN_TEST_STORE).
func daemonProcessEnv(t testing.TB, home string, extra ...string) []string {
	return append(append(os.Environ(), "KIN_TEST_DAEMON_HOME="+home, "KIN_TEST_DAEMON_STORE="+kintest.Store(t, home)), extra...)
}

func runDaemonProcess(home string) {
	runtime.MemProfileRate = 0 // as kin serve: no heap profile is served
	if os.Getenv("KIN_TEST_DAEMON_HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1 // every allocation, for a profile of a few MiB
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := daemon.DefaultConfig()
	cfg.Home, cfg.HTTPAddr = home, "off"
	cfg.Store = os.Getenv("KIN_TEST_DAEMON_STORE")
	cfg.UIDRangeDir = filepath.Join(home, "host-uid-ranges") // never the host's /var/lib/kin
	cfg.Profile = os.Getenv("KIN_TEST_DAEMON_PROFILE")
	if path := os.Getenv("KIN_TEST_DAEMON_LOG"); path != "" { // where the time goes
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
			defer f.Close()
			cfg.Logger = slog.New(slog.NewJSONHandler(f, nil))
		}
	}
	if hold := os.Getenv("KIN_TEST_DAEMON_HOLD"); hold != "" {
		// WHAT:FILE: the first write of WHAT blocks the store's writer
		// for good, once FILE is written (reconcile_test.go).
		what, file, _ := strings.Cut(hold, ":")
		cfg.WrapStore = holdStore(what, func() { os.WriteFile(file, nil, 0o600) }, make(chan struct{}))
	}
	d, err := daemon.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	<-ctx.Done()
	if path := os.Getenv("KIN_TEST_DAEMON_MEMSTATS"); path != "" { // where its memory is, its agents running, no profiling
		writeMemClasses(path + "." + strconv.Itoa(os.Getpid()))
	}
	if path := os.Getenv("KIN_TEST_DAEMON_HEAPPROFILE"); path != "" { // what its memory holds, its agents running
		runtime.GC()
		writeProfile(path+"."+strconv.Itoa(os.Getpid()), "heap", 0)
		writeProfile(path+".goroutines."+strconv.Itoa(os.Getpid()), "goroutine", 1)
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		os.WriteFile(path+".memstats."+strconv.Itoa(os.Getpid()), fmt.Appendf(nil,
			"HeapInuse %d\nHeapAlloc %d\nStackInuse %d\nMSpanInuse %d\nSys %d\nGoroutines %d\n",
			m.HeapInuse, m.HeapAlloc, m.StackInuse, m.MSpanInuse, m.Sys, runtime.NumGoroutine()), 0o600)
	}
	if path := os.Getenv("KIN_TEST_DAEMON_SHUTDOWN_CPUPROFILE"); path != "" { // where a shutdown's time goes
		if f, err := os.Create(path + "." + strconv.Itoa(os.Getpid())); err == nil {
			defer f.Close()
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	d.Close()
	if path := os.Getenv("KIN_TEST_DAEMON_CPU"); path != "" { // its own CPU, its reaped agents' not counted
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		os.WriteFile(path, []byte(strconv.FormatInt(ru.Utime.Nano()+ru.Stime.Nano(), 10)), 0o600)
	}
}

// writeMemClasses writes the Go runtime's memory classes
// (runtime/metrics), its GC cycles and the GC's CPU (its estimate, which
// counts time the machine's load took from the GC's threads), and the
// process's RssAnon and RssFile to path: what
// RssAnon holds beyond the Go runtime's memory is C's (SQLite's page
// caches and its allocator).
func writeMemClasses(path string) {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") || strings.HasPrefix(d.Name, "/gc/heap/goal") || d.Name == "/sched/goroutines:goroutines" ||
			d.Name == "/gc/cycles/total:gc-cycles" || strings.HasPrefix(d.Name, "/cpu/classes/gc/") {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	var b strings.Builder
	for _, s := range samples {
		switch s.Value.Kind() {
		case metrics.KindUint64:
			fmt.Fprintf(&b, "%-50s %10d\n", s.Name, s.Value.Uint64())
		case metrics.KindFloat64:
			fmt.Fprintf(&b, "%-50s %10.3f\n", s.Name, s.Value.Float64())
		}
	}
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Rss") || strings.HasPrefix(l, "VmRSS") {
				fmt.Fprintln(&b, l)
			}
		}
	}
	os.WriteFile(path, []byte(b.String()), 0o600)
}

// Agent programs. Each writes what the test needs to KINTEST_OUT (a file)
// and runs until killed unless it says otherwise.
//
//	sleep            wait forever
//	ignore-term      ignore SIGTERM, wait forever
//	note-term        write "ready NAME", then "term NAME" at each SIGTERM,
//	                 which it otherwise ignores; wait forever
//	double-fork      start a grandchild in a new session (setsid) that
//	                 waits forever, write its pid, wait forever
//	ask-kin          authorize read and exec, promote itself to full, report
//	                 usage; write each answer
//	exit N           exit with status N
//	echo TEXT        print TEXT to stdout and stderr, exit 0
//	token            write its agent token ("token T") and its key's path
//	                 ("key P"), then wait
//	tokens           write its agent token as "token0 T", then one more
//	                 ("token1 T", ...) at each SIGUSR1
//	whoami           write "id:<agent id>" for the own socket and the
//	                 operator socket (KINTEST_OPSOCK), then wait
//	act-as ID        ask whoami acting for agent ID (kin.HeaderActAs) on
//	                 its own socket and the operator socket; write
//	                 "act-as own: <code>" and "act-as op: <code>", then wait
//	spawn-under ID   try to spawn a child under agent ID and one under
//	                 itself; write both outcomes, then wait
//	escalate ROLE    spawn a child of ROLE (running sleep) through its own
//	                 socket; write "escalated id=I parent=P requested_by=R"
//	                 or "escalated: <code>", then what stopping that child
//	                 and reading its parent answered; then wait
//	heartbeat-crash  write KIN_RESUME_CURSOR, heartbeat with cursor
//	                 "c<agent id>", exit 1
//	daemon HOME      run a kin daemon on HOME until SIGTERM
//	on-usr1 MODE...  wait for SIGUSR1, then run MODE
//	trespass A...    try each of read:PATH, list:DIR, append:PATH, kill:PID,
//	                 fd:N (is descriptor N open);
//	                 write "VERB TARGET: ok" or the error, then "trespass done"
//	swap-spawn ...   swap a granted folder for a link while spawning
//	                 children (grants_race_test.go)
//	flood KIND N SIZE send N messages of SIZE bytes to its parent (KIND
//	                 messages) or N usage reports (KIND usage) as fast as
//	                 it can; write what was accepted and refused, then
//	                 wait (quota_test.go)
//	coder, reviewer, ... seed 001's example (handoff_test.go)
func runAgent(mode string) int {
	args := strings.Fields(mode)
	out := func(format string, a ...any) {
		if path := os.Getenv("KINTEST_OUT"); path != "" {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				fmt.Fprintf(f, format+"\n", a...)
				f.Close()
			}
		}
	}
	ctx := context.Background()
	self := func() *client.Client {
		c, err := client.New(client.Config{Socket: os.Getenv("KIN_SOCKET")})
		if err != nil {
			out("client: %v", err)
			os.Exit(2)
		}
		return c
	}
	switch args[0] {
	case "sleep":
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		out("ignoring")
	case "note-term":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		name := os.Getenv("KIN_AGENT_NAME")
		out("ready %s", name)
		go func() {
			for range term {
				out("term %s", name)
			}
		}()
	case "double-fork":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "KINTEST_MODE=sleep", "KINTEST_OUT=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			out("fork: %v", err)
			return 2
		}
		out("orphan %d", cmd.Process.Pid)
		cmd.Process.Release() // never waited for: it outlives this process's interest
	case "exit":
		n, _ := strconv.Atoi(args[1])
		return n
	case "echo":
		fmt.Println(strings.Join(args[1:], " "))
		fmt.Fprintln(os.Stderr, "err:"+strings.Join(args[1:], " "))
		return 0
	case "token":
		t, err := self().Token(ctx)
		if err != nil {
			out("error %v", err)
			return 2
		}
		out("token %s", t.Token)
		out("key %s", t.KeyPath)
	case "tokens":
		// A token now, then one more each time SIGUSR1 comes.
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		c := self()
		for n := 0; ; n++ {
			t, err := c.Token(ctx)
			if err != nil {
				out("token%d error %v", n, err)
			} else {
				out("token%d %s", n, t.Token)
			}
			<-usr1
		}
	case "whoami":
		for _, sock := range []string{os.Getenv("KIN_SOCKET"), os.Getenv("KINTEST_OPSOCK")} {
			c, _ := client.New(client.Config{Socket: sock})
			a, err := c.Whoami(ctx)
			switch {
			case err != nil:
				out("error %v", err)
			case a == nil:
				out("operator")
			default:
				out("id:%d", a.ID)
			}
		}
	case "daemon":
		runDaemonProcess(args[1]) // until SIGTERM
		return 0
	case "on-usr1":
		// The rest of the mode, once SIGUSR1 comes.
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		out("waiting for usr1")
		<-usr1
		return runAgent(strings.Join(args[1:], " "))
	case "trespass":
		// Each argument is one attempt on another daemon's agent:
		// read:PATH, list:DIR, append:PATH or kill:PID; each reports
		// "ok" or the error.
		for _, a := range args[1:] {
			verb, target, _ := strings.Cut(a, ":")
			var err error
			switch verb {
			case "read":
				_, err = os.ReadFile(target)
			case "list":
				_, err = os.ReadDir(target)
			case "append":
				var f *os.File
				if f, err = os.OpenFile(target, os.O_APPEND|os.O_WRONLY, 0); err == nil {
					_, err = f.WriteString("trespassed\n")
					f.Close()
				}
			case "kill":
				pid, _ := strconv.Atoi(target)
				err = syscall.Kill(pid, syscall.SIGKILL)
			case "fd": // is descriptor N open (inherited)?
				n, _ := strconv.Atoi(target)
				if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(n), syscall.F_GETFD, 0); e != 0 {
					err = e
				} else {
					link, _ := os.Readlink("/proc/self/fd/" + target)
					err = fmt.Errorf("open: %s", link)
				}
			}
			res := "ok"
			if err != nil {
				res = err.Error()
			}
			out("%s %s: %s", verb, target, res)
		}
		out("trespass done")
	case "act-as":
		target, _ := kin.ParseAgentID(args[1])
		for _, sock := range []struct{ kind, path string }{{"own", os.Getenv("KIN_SOCKET")}, {"op", os.Getenv("KINTEST_OPSOCK")}} {
			c, _ := client.New(client.Config{Socket: sock.path})
			a, err := c.ActingAs(target.String()).Whoami(ctx)
			if err == nil && a != nil {
				out("act-as %s: id:%d", sock.kind, a.ID)
			} else {
				out("act-as %s: %s", sock.kind, kin.ErrorCodeOf(err))
			}
		}
	case "spawn-under":
		c := self()
		target, _ := kin.ParseAgentID(args[1])
		me := os.Getenv("KIN_AGENT_NAME")
		_, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: me + "-x", Parent: target}, Command: []string{os.Args[0]}, Env: []string{"KINTEST_MODE=sleep"}})
		out("under %s: %s", args[1], kin.ErrorCodeOf(err))
		child, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: me + "-own"}, Command: []string{os.Args[0]}, Env: []string{"KINTEST_MODE=sleep"}})
		if err != nil {
			out("own: %s", kin.ErrorCodeOf(err))
		} else {
			out("own: parent=%d", child.Parent)
		}
	case "escalate":
		c := self()
		me := os.Getenv("KIN_AGENT_NAME")
		kid, err := c.Spawn(ctx, kin.SpawnRequest{RegisterRequest: kin.RegisterRequest{Name: me + "-w", Role: args[1]}, Command: []string{os.Args[0]}, Env: []string{"KINTEST_MODE=sleep"}})
		if err != nil {
			out("escalated: %s", kin.ErrorCodeOf(err))
			break
		}
		out("escalated id=%d parent=%d requested_by=%d", kid.ID, kid.Parent, kid.RequestedBy)
		_, err = c.Stop(ctx, kin.StopRequest{ID: kid.ID})
		out("stop child: %s", kin.ErrorCodeOf(err))
		_, err = c.Agent(ctx, kid.Parent)
		out("read parent: %s", kin.ErrorCodeOf(err))
	case "ask-kin":
		// What an agent asks the permission authority about itself.
		c := self()
		for _, tool := range []string{"read", "exec"} {
			dec, err := c.Authorize(ctx, kin.AuthorizeRequest{Tool: tool})
			if err != nil {
				out("authorize %s: %s", tool, kin.ErrorCodeOf(err))
			} else {
				out("authorize %s: %v", tool, dec.Allowed)
			}
		}
		me, _ := kin.ParseAgentID(os.Getenv("KIN_AGENT_ID"))
		_, err := c.Promote(ctx, kin.PromoteRequest{Agent: me, Stage: "full"})
		out("promote self: %s", kin.ErrorCodeOf(err))
		_, err = c.Usage(ctx, kin.UsageRequest{Tokens: 10})
		out("usage: %s", kin.ErrorCodeOf(err))
	case "heartbeat-crash":
		out("resume=%s", os.Getenv("KIN_RESUME_CURSOR"))
		_, err := self().Heartbeat(ctx, kin.HeartbeatRequest{Cursor: "c" + os.Getenv("KIN_AGENT_ID")})
		if err != nil {
			out("heartbeat: %v", err)
		}
		return 1
	case "coder", "reviewer", "reviewer-short", "reviewer-lie", "peek-parent", "chatty":
		return runSeed001Agent(args[0], out)
	case "swap-spawn":
		return runSwapSpawn(args[1:], self(), out)
	case "flood":
		runFlood(args[1:], self(), out)
	case "follow-streams": // attack21_test.go
		runFollowStreams(args[1:], out)
	default:
		out("unknown mode %q", mode)
		return 2
	}
	for {
		time.Sleep(time.Hour)
	}
}

// writeProfile writes the named pprof profile to path.
func writeProfile(path, name string, debug int) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	pprof.Lookup(name).WriteTo(f, debug)
}
