package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StatusFDEnv names the descriptor on which the init (Spec.Init) writes
// its child's wait status, 4 bytes little-endian, just before it exits.
// The supervisor sets it: an init's own exit status can only say "128 +
// signal" for a child killed by a signal (the init of a PID namespace
// cannot die of a signal sent from inside it), and the supervisor wants the
// child's real status. The init hides the descriptor and the variable
// from its child.
const StatusFDEnv = "KIN_INIT_STATUS_FD"

// forwarded are the signals the init passes on to every process of its
// namespace: what the daemon sends to stop an agent (TERM, CONT), what an
// operator may send by hand to the agent's pid (which is the init's).
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGCONT, syscall.SIGWINCH,
}

// runInit is run's Init form: the calling thread is restricted already
// (and locked); the command starts from it, so it inherits the domain.
// The init then stays as pid 1 of the namespace the supervisor cloned it
// into: it reaps every process that re-parents to it, forwards signals to
// all of them (kill(-1) from pid 1 reaches every process of the namespace
// but itself), and once its child ends it reports the child's status and
// exits, upon which the kernel kills whatever else is left in the
// namespace: a setsid'd, env -i'd grandchild included. It returns only if
// the command could not start.
func (p *plan) runInit() (int, error) {
	statusFD := -1
	if v := os.Getenv(StatusFDEnv); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			statusFD = fd
			syscall.CloseOnExec(fd)
		}
	}
	env := withoutVar(os.Environ(), StatusFDEnv)
	path, argv := p.path, p.argv
	if p.childSpec != nil {
		// The address-space limit goes on the child only: a shim started
		// as the child sets it right before its exec.
		b, err := json.Marshal(p.childSpec)
		if err != nil {
			return ExitCannotRun, fmt.Errorf("init: %v", err)
		}
		path, argv = "/proc/self/exe", []string{os.Args[0], Subcommand, specFlag, string(b)}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		return ExitCannotRun, fmt.Errorf("init: start %s: %v", quote(argv[0]), err)
	}
	go func() {
		for s := range sigs {
			unix.Kill(-1, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return ExitCannotRun, fmt.Errorf("init: wait for %d: %v", pid, err)
		}
		if wpid != pid {
			continue // an orphan of the namespace, reaped
		}
		if statusFD >= 0 {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(ws))
			unix.Write(statusFD, b[:])
		}
		code := ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		os.Exit(code)
	}
}

// withoutVar is env without the variable name.
func withoutVar(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
