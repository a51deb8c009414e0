package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// superuser is the role initdb makes and every DSN connects as.
const superuser = "postgres"

// maxSocketPath is the longest Unix socket path the kernel takes
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// socketName is the server's socket in its socket directory on port
// 5432, the port of every cluster but a Server's (each cluster has a
// directory of its own).
const socketName = ".s.PGSQL.5432"

// MissingError says PostgreSQL's server binaries were not found, and how
// to get them.
type MissingError struct {
	What string // what was looked for, and where
}

func (e *MissingError) Error() string {
	return "PostgreSQL's server is missing: " + e.What +
		" (apt-get install postgresql, or set " + EnvBindir + " to the directory of initdb and postgres)"
}

// cluster is one running server.
type cluster struct {
	bin  string // the directory of initdb and postgres (and pgbench, psql)
	dir  string // kinpg-PID-*: everything below is the cluster's
	data string // the data directory
	sock string // the socket directory
	log  string // the server's output

	cmd     *exec.Cmd
	exited  chan struct{} // closed once the server exited
	waitErr error         // the server's exit, once exited is closed

	// osUser is the user the server runs as ("" for oneself) and
	// madeUser whether pgtest made it (and removes it at stop).
	osUser   string
	madeUser bool

	// tcp, for a Server, is where it listens besides its socket and whom
	// it lets in there; nil: the socket only.
	tcp *ServerConfig

	version int // server_version_num

	initdbTook, readyTook time.Duration // how long the start took, for the notes

	adminMu sync.Mutex
	admin   *pgx.Conn // to the postgres database: creates and drops
}

// forceNewUser makes start create a user even where the postgres user
// exists (pgtest's own test of that path).
var forceNewUser bool

// start makes and starts a cluster, removing what earlier test binaries
// killed before their Main left behind. With tcp it also listens there
// (StartServer).
func start(ctx context.Context, tcp *ServerConfig) (_ *cluster, err error) {
	bin, err := findBindir()
	if err != nil {
		return nil, err
	}
	sweepStale()
	c := &cluster{tcp: tcp, bin: bin}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		var u *user.User
		u, c.madeUser, err = serverUser()
		if err != nil {
			return nil, err
		}
		c.osUser = u.Username
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	defer func() {
		if err != nil {
			if c.cmd != nil && c.cmd.Process != nil { // started, never ready
				c.cmd.Process.Kill()
				<-c.exited
			}
			c.cleanup()
		}
	}()
	if err := c.makeDirs(cred); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + bin + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}

	initdb := exec.Command(filepath.Join(bin, "initdb"),
		"-D", c.data, "-U", superuser, "-E", "UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=reject",
		"--no-sync", "--no-instructions") // a throw-away cluster: durability starts with the server
	initdb.Dir, initdb.Env = c.dir, env
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	initdb.Stdout, initdb.Stderr = &out, &out
	t0 := time.Now()
	onLockedThread(func() { err = initdb.Run() })
	c.initdbTook = time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("initdb %s as %s (who must reach it: every directory above needs o+x; TMPDIR chooses the parent): %v: %s",
			c.data, c.userName(), err, bytes.TrimSpace(out.Bytes()))
	}

	args := []string{"-D", c.data, "-k", c.sock,
		"-c", "listen_addresses=", // the Unix socket only
		"-c", "max_connections=300", // many daemons in parallel, each with a pool
		"-c", "shared_buffers=32MB", // several test binaries run at once
		// Its dynamic shared memory in files of the data directory, gone
		// with it: POSIX segments (/dev/shm/PostgreSQL.<n>, the default)
		// outlive a server killed by its test binary's death (Pdeathsig),
		// and 200 of them had piled up on these machines.
		"-c", "dynamic_shared_memory_type=mmap",
	}
	if tcp != nil {
		if err := c.allowTCP(); err != nil {
			return nil, err
		}
		args = append(args, "-c", "listen_addresses="+tcp.Listen.String(), "-p", strconv.Itoa(tcp.port()),
			"-c", "password_encryption=scram-sha-256")
	}
	switch f := os.Getenv(EnvFsync); f {
	case "":
	case "on", "off":
		args = append(args, "-c", "fsync="+f)
	default:
		return nil, fmt.Errorf("%s=%q: want on or off (unset: the server's default)", EnvFsync, f)
	}
	logf, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the server has its own descriptor
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	c.cmd.Dir, c.cmd.Env = c.dir, env
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	t0 = time.Now()
	if err := c.startServer(); err != nil {
		return nil, fmt.Errorf("start postgres: %v", err)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.readyTook = time.Since(t0)
	return c, nil
}

// userName is who the server runs as, for messages.
func (c *cluster) userName() string {
	if c.osUser == "" {
		return "the test's own user"
	}
	return "user " + c.osUser
}

// makeDirs makes the cluster's directory, short enough for the socket's
// path, owned by the server's user and reachable only by it (and root).
func (c *cluster) makeDirs(cred *syscall.Credential) error {
	parent := os.TempDir()
	if len(filepath.Join(parent, "kinpg-2147483647-1234567890", "s", socketName)) > maxSocketPath {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "kinpg-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return err
	}
	c.dir, c.data, c.sock, c.log = dir, filepath.Join(dir, "data"), filepath.Join(dir, "s"), filepath.Join(dir, "postgres.log")
	if err := os.Mkdir(c.sock, 0o700); err != nil {
		return err
	}
	if cred != nil {
		for _, p := range []string{c.dir, c.sock} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	return os.Chmod(c.dir, 0o700)
}

// onLockedThread runs f on an OS thread no other goroutine runs on, until
// f returns: a process f starts with Pdeathsig dies with that thread
// (PDEATHSIG fires when the parent thread exits, not the process).
func onLockedThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f()
	}()
	<-done
}

// startServer starts c.cmd from a goroutine locked to its OS thread for
// the server's whole life: the goroutine waits for the server, so the
// thread (the server's parent, whose exit sends it SIGKILL) ends with the
// test binary or after the server exited, never before.
func (c *cluster) startServer() error {
	started := make(chan error, 1)
	c.exited = make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := c.cmd.Start(); err != nil {
			close(c.exited)
			started <- err
			return
		}
		started <- nil
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	return <-started
}

// waitReady waits until the server accepts a connection, or exits, or ctx
// ends; it keeps that connection for creating and dropping databases.
func (c *cluster) waitReady(ctx context.Context) error {
	var last error
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		if _, err := os.Stat(filepath.Join(c.sock, c.socketName())); err == nil {
			conn, err := pgx.Connect(ctx, c.dsn("postgres"))
			if err == nil {
				c.admin = conn
				return c.readVersion(ctx)
			}
			last = err
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited before it was ready (%v): %s", c.waitErr, c.logTail())
		case <-ctx.Done():
			return fmt.Errorf("postgres was not ready in time (last: %v): %s", last, c.logTail())
		case <-time.After(delay):
		}
	}
}

func (c *cluster) readVersion(ctx context.Context) error {
	var v string
	if err := c.admin.QueryRow(ctx, "SHOW server_version_num").Scan(&v); err != nil {
		return err
	}
	c.version, _ = strconv.Atoi(v)
	return nil
}

// logTail is the end of the server's log, for errors.
func (c *cluster) logTail() string {
	b, _ := os.ReadFile(c.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// dsn is a pgx DSN for database db: the superuser over the socket.
func (c *cluster) dsn(db string) string {
	port := ""
	if c.tcp != nil {
		port = "&port=" + strconv.Itoa(c.tcp.port())
	}
	return "postgres://" + superuser + "@/" + db + "?host=" + c.sock + port + "&sslmode=disable"
}

// socketName is the server's socket in c.sock.
func (c *cluster) socketName() string {
	if c.tcp == nil {
		return socketName
	}
	return ".s.PGSQL." + strconv.Itoa(c.tcp.port())
}

// allowTCP lets c.tcp.Allow in over TCP with a password (scram-sha-256):
// initdb's pg_hba.conf lets in only the socket (trust) and rejects the
// rest; the first line that matches decides, so this one goes first.
func (c *cluster) allowTCP() error {
	hba := filepath.Join(c.data, "pg_hba.conf")
	b, err := os.ReadFile(hba)
	if err != nil {
		return err
	}
	line := "host all all " + c.tcp.Allow.Masked().String() + " scram-sha-256\n"
	return os.WriteFile(hba, append([]byte(line), b...), 0o600) // the file exists: its owner stays the server's user
}

func (c *cluster) create(name string) error {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := c.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %v", name, err)
	}
	return nil
}

// drop drops a database, terminating its connections first.
func (c *cluster) drop(name string) error {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	q := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize()
	if c.version >= 130000 {
		q += " WITH (FORCE)"
	} else if _, err := c.admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		return fmt.Errorf("drop database %s: %v", name, err)
	}
	if _, err := c.admin.Exec(ctx, q); err != nil {
		return fmt.Errorf("drop database %s: %v", name, err)
	}
	return nil
}

// stop shuts the server down (SIGINT: PostgreSQL's fast shutdown, which
// ends every session), waits for it, and removes its files and any user
// start made.
func (c *cluster) stop() error {
	if c.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.admin.Close(ctx)
		cancel()
	}
	var errs []error
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.exited:
		case <-time.After(time.Minute):
			errs = append(errs, fmt.Errorf("postgres (pid %d) ignored a fast shutdown for a minute; killed: %s", c.cmd.Process.Pid, c.logTail()))
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
	if err := c.cleanup(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanup removes the cluster's files and the user start made (the
// server has exited).
func (c *cluster) cleanup() error {
	var errs []error
	if c.dir != "" {
		removeShm(c.data)
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if c.madeUser {
		if out, err := exec.Command("userdel", c.osUser).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("userdel %s: %v: %s", c.osUser, err, out))
		}
	}
	return errors.Join(errs...)
}

// serverUser is the unprivileged user a root test binary runs the server
// as: the postgres system user Debian's package makes, else a system user
// made for this test binary (kinpg-PID, removed at stop or by the next
// start after a crash).
func serverUser() (u *user.User, made bool, err error) {
	if !forceNewUser {
		if u, err := user.Lookup("postgres"); err == nil {
			return u, false, nil
		}
	}
	name := userPrefix + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", userComment, name).CombinedOutput(); err != nil {
		return nil, false, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user: useradd %s: %v: %s", name, err, out)
	}
	u, err = user.Lookup(name)
	if err != nil {
		exec.Command("userdel", name).Run()
		return nil, false, err
	}
	return u, true, nil
}

// userPrefix starts the names of the users pgtest makes.
const userPrefix = "kinpg-"

// userComment is the GECOS field of the users pgtest makes: the sweep
// removes no user without it, whatever its name.
const userComment = "kin test PostgreSQL server (pgtest)"

// findBindir finds the directory of initdb and postgres: $KIN_PG_BINDIR,
// else `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin.
func findBindir() (string, error) {
	if d := os.Getenv(EnvBindir); d != "" {
		if err := hasServer(d); err != nil {
			return "", &MissingError{What: fmt.Sprintf("%s=%s: %v", EnvBindir, d, err)}
		}
		return d, nil
	}
	looked := []string{}
	// Debian's pg_config (libpq-dev) may name a directory without the server.
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if hasServer(d) == nil {
			return d, nil
		}
		looked = append(looked, d+" (pg_config --bindir)")
	} else {
		looked = append(looked, "pg_config (not on PATH)")
	}
	if d := newestVersionDir("/usr/lib/postgresql"); d != "" {
		return d, nil
	}
	looked = append(looked, "/usr/lib/postgresql/*/bin")
	return "", &MissingError{What: "no initdb and postgres in " + strings.Join(looked, ", ")}
}

// hasServer says whether dir holds initdb and postgres.
func hasServer(dir string) error {
	for _, b := range []string{"initdb", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil {
			return err
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", filepath.Join(dir, b))
		}
	}
	return nil
}

// newestVersionDir is root/VERSION/bin with the highest VERSION that holds
// the server, or "".
func newestVersionDir(root string) string {
	ents, _ := os.ReadDir(root)
	best, bestV := "", -1.0
	for _, e := range ents {
		v, err := strconv.ParseFloat(e.Name(), 64) // 15, 16, or 9.6
		d := filepath.Join(root, e.Name(), "bin")
		if err != nil || v <= bestV || hasServer(d) != nil {
			continue
		}
		best, bestV = d, v
	}
	return best
}
