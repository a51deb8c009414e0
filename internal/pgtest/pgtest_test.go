package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/kin-agents/kin/internal/proctest"
)

// The helper test (TestHelperCluster) run in a child test binary reads
// these.
const (
	envHelperOut  = "KIN_PGTEST_HELPER_OUT"  // where it writes "PID DIR USER FSYNC"
	envHelperHang = "KIN_PGTEST_HELPER_HANG" // 1: it then waits to be killed
	envNewUser    = "KIN_PGTEST_NEW_USER"    // 1: the cluster runs as a user it makes
)

func TestMain(m *testing.M) {
	forceNewUser = os.Getenv(envNewUser) == "1"
	os.Exit(Main(m))
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// databaseExists asks the cluster (through a database of its own).
func databaseExists(t *testing.T, conn *pgx.Conn, dsn string) bool {
	t.Helper()
	name := strings.TrimPrefix(strings.SplitN(dsn, "?", 2)[0], "postgres://"+superuser+"@/")
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestDatabaseIsUsable(t *testing.T) {
	dsn := NewDatabase(t)
	if !strings.HasPrefix(dsn, "postgres://postgres@/t") || !strings.Contains(dsn, "?host=/") {
		t.Errorf("DSN %q: want postgres://postgres@/NAME?host=SOCKDIR...", dsn)
	}
	conn := connect(t, dsn)
	exec1(t, conn, "CREATE TABLE agents (id bigint PRIMARY KEY, name text NOT NULL)")
	exec1(t, conn, "INSERT INTO agents VALUES (1, 'root'), (2, 'child')")
	var names string
	if err := conn.QueryRow(context.Background(), "SELECT string_agg(name, ',' ORDER BY id) FROM agents").Scan(&names); err != nil {
		t.Fatal(err)
	}
	if names != "root,child" {
		t.Errorf("read back %q, want root,child", names)
	}
	var enc string
	if err := conn.QueryRow(context.Background(), "SHOW server_encoding").Scan(&enc); err != nil || enc != "UTF8" {
		t.Errorf("server_encoding %q (%v), want UTF8", enc, err)
	}
	// Nothing of it outside its directory: a killed server's POSIX shared
	// memory segments stay in /dev/shm.
	var dsm string
	if err := conn.QueryRow(context.Background(), "SHOW dynamic_shared_memory_type").Scan(&dsm); err != nil || dsm != "mmap" {
		t.Errorf("dynamic_shared_memory_type %q (%v), want mmap (files in the data directory)", dsm, err)
	}

	// Only the server's user (and root) reach the socket.
	c := get(t)
	st, err := os.Stat(c.sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory %s has mode %v, want 0700", c.sock, st.Mode().Perm())
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid == 0 {
		t.Errorf("socket directory %s is root's: the server must not run as root", c.sock)
	}
	t.Logf("cluster: initdb %v, postgres ready %v later, as %s, server %d", c.initdbTook, c.readyTook, c.userName(), c.version)
}

func TestDatabasesAreIsolated(t *testing.T) {
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two databases have one DSN %q", a)
	}
	ca, cb := connect(t, a), connect(t, b)
	exec1(t, ca, "CREATE TABLE only_in_a (x int)")
	exec1(t, ca, "INSERT INTO only_in_a VALUES (1)")
	var n int
	if err := cb.QueryRow(context.Background(), "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("the table made in one database is in the other")
	}
	// The same table name in both holds different rows.
	exec1(t, cb, "CREATE TABLE only_in_a (x int)")
	if err := cb.QueryRow(context.Background(), "SELECT count(*) FROM only_in_a").Scan(&n); err != nil || n != 0 {
		t.Errorf("the other database's table has %d rows (%v), want 0", n, err)
	}
}

func TestDatabaseIsDroppedWhenTheTestEnds(t *testing.T) {
	observer := connect(t, NewDatabase(t))
	var dsn string
	t.Run("uses", func(t *testing.T) {
		dsn = NewDatabase(t)
		conn := connect(t, dsn)
		exec1(t, conn, "CREATE TABLE x (y int)")
		// A connection still open when the test ends (registered
		// before the database, so closed after its drop): the drop
		// terminates it.
		held, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { held.Close(context.Background()) })
		if !databaseExists(t, observer, dsn) {
			t.Fatal("the new database is not in pg_database")
		}
	})
	if databaseExists(t, observer, dsn) {
		t.Errorf("the database of a test that ended is still there: %s", dsn)
	}
}

func TestDatabaseFor(t *testing.T) {
	observer := connect(t, NewDatabase(t))
	var first string
	t.Run("creates", func(t *testing.T) {
		first = DatabaseFor(t, "/tmp/kin123/home")
		exec1(t, connect(t, first), "CREATE TABLE kept (x int)")
		again := DatabaseFor(t, "/tmp/kin123/home")
		if again != first {
			t.Errorf("the same key gave %q, then %q", first, again)
		}
		var n int
		if err := connect(t, again).QueryRow(context.Background(), "SELECT count(*) FROM kept").Scan(&n); err != nil {
			t.Errorf("the second DSN for a key is not the first's database: %v", err)
		}
		if other := DatabaseFor(t, "/tmp/kin456/home"); other == first {
			t.Errorf("two keys share %q", other)
		}
	})
	if databaseExists(t, observer, first) {
		t.Errorf("a key's database outlived the test that made it: %s", first)
	}

	dsn := DatabaseFor(t, "dropped early")
	Drop(t, dsn)
	if databaseExists(t, observer, dsn) {
		t.Errorf("Drop left %s", dsn)
	}
	Drop(t, dsn) // twice is no error
	if fresh := DatabaseFor(t, "dropped early"); fresh == dsn || !databaseExists(t, observer, fresh) {
		t.Errorf("after Drop, DatabaseFor gave %q (dropped: %q)", fresh, dsn)
	}
}

func TestFindBindir(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(EnvBindir, empty)
	_, err := findBindir()
	var missing *MissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "apt-get install postgresql") {
		t.Errorf("an empty %s gave %v, want a MissingError naming it and the package", EnvBindir, err)
	}

	root := t.TempDir()
	for v, server := range map[string]bool{"9.6": true, "15": true, "16": false, "notaversion": true} {
		bin := filepath.Join(root, v, "bin")
		os.MkdirAll(bin, 0o755)
		if server {
			for _, b := range []string{"initdb", "postgres"} {
				os.WriteFile(filepath.Join(bin, b), nil, 0o755)
			}
		}
	}
	if got, want := newestVersionDir(root), filepath.Join(root, "15", "bin"); got != want {
		t.Errorf("newest version with a server: %q, want %q", got, want)
	}
}

// TestBindir: Bindir is the running cluster's directory, the one its
// server runs from (so its pgbench talks to the same version).
func TestBindir(t *testing.T) {
	bin := Bindir(t)
	if err := hasServer(bin); err != nil {
		t.Fatalf("Bindir %q: %v", bin, err)
	}
	state.mu.Lock()
	server := state.c.cmd.Path
	state.mu.Unlock()
	if filepath.Dir(server) != bin {
		t.Errorf("Bindir %q, but the server runs %s", bin, server)
	}
}

// needServer skips (or fails, under KIN_TEST_REQUIRE_POSTGRES=1) where
// the server is missing, without starting a cluster in this process.
func needServer(t *testing.T) {
	t.Helper()
	if _, err := findBindir(); err != nil {
		if os.Getenv(EnvRequire) != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

// child runs TestHelperCluster in a copy of this test binary with env.
func child(t *testing.T, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCluster$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KIN_PG") && !strings.HasPrefix(kv, EnvRequire+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

type helperReport struct {
	pid   int // the server's
	dir   string
	user  string
	fsync string // the server's setting
}

func readReport(t *testing.T, path string) (helperReport, bool) {
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return helperReport{}, false
	}
	f := strings.Fields(string(b))
	if len(f) != 4 {
		t.Fatalf("helper wrote %q", b)
	}
	pid, _ := strconv.Atoi(f[0])
	return helperReport{pid, f[1], f[2], f[3]}, true
}

// TestHelperCluster is run by the tests below in a child test binary: it
// starts the cluster, uses a database, reports, and maybe waits to be
// killed.
func TestHelperCluster(t *testing.T) {
	out := os.Getenv(envHelperOut)
	if out == "" {
		t.Skip("run by the tests of Main and of a killed test binary")
	}
	conn := connect(t, NewDatabase(t))
	exec1(t, conn, "CREATE TABLE x (y int)")
	var fsync string
	if err := conn.QueryRow(context.Background(), "SHOW fsync").Scan(&fsync); err != nil {
		t.Fatal(err)
	}
	c := get(t)
	u := c.osUser
	if u == "" {
		u = "-"
	}
	if err := os.WriteFile(out, fmt.Appendf(nil, "%d %s %s %s\n", c.cmd.Process.Pid, c.dir, u, fsync), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envHelperHang) == "1" {
		<-make(chan struct{}) // until kill -9
	}
}

func TestMainStopsTheServerAndRemovesItsFiles(t *testing.T) {
	needServer(t)
	out := filepath.Join(t.TempDir(), "report")
	if b, err := child(t, envHelperOut+"="+out).CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, b)
	}
	r, ok := readReport(t, out)
	if !ok {
		t.Fatal("the helper wrote no report")
	}
	// Main waited for the server: it is gone the moment the binary is.
	if proctest.Alive(r.pid) {
		t.Errorf("postgres (pid %d) outlived its test binary's Main", r.pid)
	}
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("Main left the cluster's directory %s (%v)", r.dir, err)
	}
	if r.fsync != "on" {
		t.Errorf("fsync is %s by default, want the server's default (on): benchmarks measure durability", r.fsync)
	}
}

func TestFsyncIsConfigurable(t *testing.T) {
	needServer(t)
	out := filepath.Join(t.TempDir(), "report")
	if b, err := child(t, envHelperOut+"="+out, EnvFsync+"=off").CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, b)
	}
	if r, ok := readReport(t, out); !ok || r.fsync != "off" {
		t.Errorf("%s=off: the server has fsync %q", EnvFsync, r.fsync)
	}
	b, err := child(t, envHelperOut+"="+out, EnvFsync+"=sometimes").CombinedOutput()
	if err == nil || !strings.Contains(string(b), `KIN_PG_FSYNC="sometimes": want on or off`) {
		t.Errorf("%s=sometimes should fail, saying what it takes (%v):\n%s", EnvFsync, err, b)
	}
}

func TestKilledTestBinaryTakesTheServer(t *testing.T) {
	needServer(t)
	out := filepath.Join(t.TempDir(), "report")
	cmd := child(t, envHelperOut+"="+out, envHelperHang+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var r helperReport
	waitFor(t, time.Minute, "the helper's report", func() bool {
		var ok bool
		r, ok = readReport(t, out)
		return ok
	})
	data := filepath.Join(r.dir, "data")
	if !proctest.Alive(r.pid) || !isServerOf(r.pid, data) {
		t.Fatalf("pid %d is not the helper's running server", r.pid)
	}
	pidfile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}

	cmd.Process.Kill() // SIGKILL: no Main, no cleanup
	cmd.Wait()
	waitFor(t, 30*time.Second, fmt.Sprintf("postgres (pid %d) to die with its test binary", r.pid), func() bool { return !proctest.Alive(r.pid) })
	waitFor(t, 30*time.Second, "the server's processes to end", func() bool { return len(proctest.WithArg(r.dir)) == 0 })
	if _, err := os.Stat(r.dir); err != nil {
		t.Fatalf("the killed binary's directory is already gone (%v): nothing left to sweep", err)
	}

	// The next cluster's start sweeps what the killed binary left.
	sweepStale()
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("the sweep left the killed binary's directory %s (%v)", r.dir, err)
	}
	if lines := strings.Split(string(pidfile), "\n"); len(lines) > 6 {
		if f := strings.Fields(lines[6]); len(f) == 2 {
			id, _ := strconv.Atoi(f[1])
			var desc unix.SysvShmDesc
			if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err == nil {
				t.Errorf("the sweep left the server's shared memory segment %d (%d attached)", id, desc.Nattch)
			}
		}
	}
	if r.user != "-" && r.user != "postgres" {
		if _, err := user.Lookup(r.user); err == nil {
			t.Errorf("the sweep left the user %s", r.user)
		}
	}
}

func TestRootWithoutPostgresUserMakesOneAndRemovesIt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the server runs as a user pgtest makes only under root")
	}
	needServer(t)
	out := filepath.Join(t.TempDir(), "report")
	if b, err := child(t, envHelperOut+"="+out, envNewUser+"=1").CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, b)
	}
	r, ok := readReport(t, out)
	if !ok {
		t.Fatal("the helper wrote no report")
	}
	if !strings.HasPrefix(r.user, userPrefix) {
		t.Fatalf("the server ran as %q, want a user pgtest made (%s*)", r.user, userPrefix)
	}
	if _, err := user.Lookup(r.user); err == nil {
		t.Errorf("Main left the user %s", r.user)
		exec.Command("userdel", r.user).Run()
	}
}

func TestMissingServerSkipsUnlessRequired(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	nowhere := filepath.Join(t.TempDir(), "no-postgres")
	b, err := child(t, envHelperOut+"="+out, EnvBindir+"="+nowhere).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "--- SKIP: TestHelperCluster") || !strings.Contains(string(b), "apt-get install postgresql") || !strings.Contains(string(b), nowhere) {
		t.Errorf("without a server the test should skip, naming what is missing and the package (%v):\n%s", err, b)
	}
	b, err = child(t, envHelperOut+"="+out, EnvBindir+"="+nowhere, EnvRequire+"=1").CombinedOutput()
	if err == nil || !strings.Contains(string(b), "--- FAIL: TestHelperCluster") {
		t.Errorf("with %s=1 a missing server should fail the test (%v):\n%s", EnvRequire, err, b)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for delay := time.Millisecond; !cond(); delay = min(delay*2, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(delay)
	}
}

// BenchmarkCreateDropDatabase is what NewDatabase costs a test: a
// CREATE DATABASE and, at the end, a DROP DATABASE WITH (FORCE).
func BenchmarkCreateDropDatabase(b *testing.B) {
	c := get(b)
	var create, drop time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench%d", i)
		t0 := time.Now()
		if err := c.create(name); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := c.drop(name); err != nil {
			b.Fatal(err)
		}
		create, drop = create+t1.Sub(t0), drop+time.Since(t1)
	}
	b.ReportMetric(float64(create.Microseconds())/float64(b.N)/1000, "create-ms/op")
	b.ReportMetric(float64(drop.Microseconds())/float64(b.N)/1000, "drop-ms/op")
}

// freePort is a TCP port on 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestServerOverTCPWithPassword(t *testing.T) {
	needServer(t)
	lo := netip.MustParseAddr("127.0.0.1")
	var srv *Server
	t.Run("serves", func(t *testing.T) {
		srv = StartServer(t, ServerConfig{Listen: lo, Port: freePort(t), Allow: netip.PrefixFrom(lo, 32)})
		dsn := srv.NewDatabase(t, "kin", "s3cr'et")
		want := fmt.Sprintf("postgres://kin:s3cr%%27et@%s/kin_db?sslmode=disable", srv.Addr())
		if dsn != want {
			t.Errorf("DSN %q, want %q", dsn, want)
		}
		conn := connect(t, dsn)
		exec1(t, conn, "CREATE TABLE owned (x int)") // the role owns the database
		// The socket still lets the superuser in (trust), for the test's
		// own administration.
		admin := connect(t, srv.SocketDSN("kin_db"))
		var method string
		if err := admin.QueryRow(context.Background(),
			"SELECT auth_method FROM pg_hba_file_rules WHERE address = '127.0.0.1' ORDER BY line_number LIMIT 1").Scan(&method); err != nil || method != "scram-sha-256" {
			t.Errorf("the first pg_hba rule for 127.0.0.1 is %q (%v), want scram-sha-256", method, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		bad := strings.Replace(dsn, "s3cr%27et", "wrong", 1)
		if c, err := pgx.Connect(ctx, bad); err == nil {
			c.Close(ctx)
			t.Error("a wrong password was let in")
		} else if !strings.Contains(err.Error(), "password authentication failed") {
			t.Errorf("a wrong password: %v, want password authentication failed", err)
		}
	})
	select {
	case <-srv.Exited():
	default:
		t.Errorf("%s outlived its test", srv)
	}
	if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
		t.Errorf("the server's directory %s outlived its test (%v)", srv.Dir(), err)
	}
}

func TestServerRefusesClientsNotAllowed(t *testing.T) {
	needServer(t)
	lo := netip.MustParseAddr("127.0.0.1")
	srv := StartServer(t, ServerConfig{Listen: lo, Port: freePort(t), Allow: netip.MustParsePrefix("10.255.255.0/24")})
	dsn := srv.NewDatabase(t, "kin", "pw")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		c.Close(ctx)
		t.Error("a client outside Allow was let in")
	} else if !strings.Contains(err.Error(), "reject") && !strings.Contains(err.Error(), "pg_hba.conf") {
		t.Errorf("a client outside Allow: %v, want refused by pg_hba.conf", err)
	}
}

// TestSweepRemovesOnlyUsersPgtestMade: the sweep deletes a dead binary's
// user that pgtest made, and keeps an account of the same form of name
// that it did not make (no userComment).
func TestSweepRemovesOnlyUsersPgtestMade(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making test users needs root (useradd)")
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	made := userPrefix + strconv.Itoa(gone.Process.Pid)
	foreign := userPrefix + strconv.Itoa(gone.Process.Pid+1_000_000_000) // a pid no process has
	for _, u := range []struct{ name, comment string }{{made, userComment}, {foreign, "someone"}} {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment", u.comment, u.name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", u.name, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", u.name).Run() })
	}
	sweepStale()
	if _, err := user.Lookup(made); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("the sweep left %s, a dead binary's user pgtest made (lookup: %v)", made, err)
	}
	if _, err := user.Lookup(foreign); err != nil {
		t.Errorf("the sweep removed %s, which pgtest did not make: %v", foreign, err)
	}
}
