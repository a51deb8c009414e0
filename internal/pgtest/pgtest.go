// Package pgtest runs tests against a real, throw-away PostgreSQL server:
// one cluster per test binary, started on first use (initdb into a temp
// directory as an unprivileged user, postgres on a Unix socket only, trust
// authentication on that socket, whose directory only the cluster's user
// and root reach), a fresh database per test, and the cluster stopped and
// its files removed by Main, which the package's TestMain calls.
//
// The server never outlives the test binary: it is started from an OS
// thread held for its whole life with PDEATHSIG=SIGKILL, so a test binary
// killed with SIGKILL takes it along; the files such a binary leaves are
// removed by the next cluster's start (kinpg-PID-* whose PID is gone).
//
// Where PostgreSQL's server binaries are missing the tests that ask for a
// database skip, naming what is missing, unless KIN_TEST_REQUIRE_POSTGRES=1
// (CI), where they fail.
//
// It is test infrastructure: only tests import it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The environment pgtest reads.
const (
	// EnvRequire, set to 1, turns a missing PostgreSQL into a failure
	// instead of a skip (CI sets it).
	EnvRequire = "KIN_TEST_REQUIRE_POSTGRES"
	// EnvBindir names the directory of initdb and postgres, overriding
	// `pg_config --bindir` and /usr/lib/postgresql/*/bin.
	EnvBindir = "KIN_PG_BINDIR"
	// EnvFsync, "on" or "off", sets the server's fsync; unset keeps the
	// server's default (on): benchmarks measure durability.
	EnvFsync = "KIN_PG_FSYNC"
)

// opTimeout bounds each administrative statement (create, drop).
const opTimeout = time.Minute

// The test binary's cluster and its databases.
var state struct {
	mu    sync.Mutex
	main  bool     // Main is running the tests
	c     *cluster // started on first use
	err   error    // why the cluster could not start: every later use reports it
	n     int      // databases made, for unique names
	keyed map[string]string
}

// Main runs m's tests and then stops the cluster if a test started one and
// removes its files. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	state.mu.Lock()
	state.main = true
	state.mu.Unlock()
	code := m.Run()
	state.mu.Lock()
	c := state.c
	state.c, state.main = nil, false
	state.keyed = nil
	state.mu.Unlock()
	if c != nil {
		if err := c.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// NewDatabase creates a fresh database on the test binary's cluster and
// returns a DSN pgx understands; the database is dropped (its connections
// terminated) when t ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	c := get(t)
	state.mu.Lock()
	state.n++
	name := fmt.Sprintf("t%d_%s", state.n, sanitize(t.Name()))
	state.mu.Unlock()
	if err := c.create(name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := c.drop(name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c.dsn(name)
}

// Bindir is the directory of the running cluster's server binaries, where
// its client programs (pgbench, psql) are too: a benchmark runs pgbench
// from there against a database of the same cluster, as its floor. It
// starts the cluster, and skips t as NewDatabase does.
func Bindir(t testing.TB) string {
	t.Helper()
	return get(t).bin
}

// DatabaseFor returns the DSN of the database for key, the same for the
// same key within the test binary (a test that restarts a daemon on the
// same store keys it by the daemon's home). The first call creates it, and
// it is dropped when the test of that call ends, or earlier by Drop; a
// call after that creates it afresh.
func DatabaseFor(t testing.TB, key string) string {
	t.Helper()
	c := get(t)
	state.mu.Lock()
	defer state.mu.Unlock() // held while creating: two callers of one key get one database
	if name, ok := state.keyed[key]; ok {
		return c.dsn(name)
	}
	state.n++
	name := fmt.Sprintf("k%d", state.n)
	if err := c.create(name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if state.keyed == nil {
		state.keyed = map[string]string{}
	}
	state.keyed[key] = name
	t.Cleanup(func() {
		if err := dropKeyed(c, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c.dsn(name)
}

// Drop drops the database dsn names now (NewDatabase's or DatabaseFor's),
// terminating its connections. Dropping one already dropped is no error.
func Drop(t testing.TB, dsn string) {
	t.Helper()
	c := get(t)
	u, err := url.Parse(dsn)
	if err != nil || u.Query().Get("host") != c.sock || strings.TrimPrefix(u.Path, "/") == "" {
		t.Fatalf("pgtest: %q is not a database of this test binary's cluster", dsn)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if err := dropKeyed(c, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// dropKeyed drops name and forgets any key that named it.
func dropKeyed(c *cluster, name string) error {
	state.mu.Lock()
	for k, n := range state.keyed {
		if n == name {
			delete(state.keyed, k)
		}
	}
	state.mu.Unlock()
	return c.drop(name)
}

// get returns the test binary's cluster, starting it on first use; it
// skips t where PostgreSQL is missing (fails it under EnvRequire).
func get(t testing.TB) *cluster {
	t.Helper()
	state.mu.Lock()
	defer state.mu.Unlock()
	if !state.main {
		t.Fatal("pgtest: this test binary's TestMain must call pgtest.Main, which stops the cluster and removes its files")
	}
	if state.c == nil && state.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		state.c, state.err = start(ctx, nil)
		cancel()
	}
	if state.err != nil {
		var missing *MissingError
		if errors.As(state.err, &missing) && os.Getenv(EnvRequire) != "1" {
			t.Skipf("pgtest: %v", state.err)
		}
		t.Fatalf("pgtest: %v", state.err)
	}
	return state.c
}

// sanitize makes s part of a database name: lower-case letters, digits
// and underscores, short enough for PostgreSQL's 63 bytes with a prefix.
func sanitize(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
