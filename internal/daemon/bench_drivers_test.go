package daemon_test

// The registry's benchmarks on both store drivers in one run (issue 23):
// registrations, spawn throughput, the responsibility chain and the
// subtree, each on SQLite and on PostgreSQL, each against its floor.
// docs/PERFORMANCE.md has the command and the numbers.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/postgres"
	"github.com/kin-agents/kin/internal/store/storeopen"
)

// benchDriver is a store driver the benchmarks run on.
type benchDriver struct {
	name string // storeopen's driver name: the sub-benchmarks' store=NAME
	// dsn is the store of home: a daemon on home and the benchmark's
	// own handles open it. It lives as long as b.
	dsn func(b *testing.B, home string) string
	// rebind turns the floors' SQL (written with ?) into the driver's.
	rebind func(q string) string
	// sqlDriver is database/sql's name for the floors' direct handle.
	sqlDriver string
}

var (
	sqliteDriver = benchDriver{
		name:      storeopen.DriverSQLite,
		dsn:       func(*testing.B, string) string { return storeopen.DriverSQLite }, // <home>/kin.db
		rebind:    func(q string) string { return q },
		sqlDriver: "sqlite",
	}
	postgresDriver = benchDriver{
		name: storeopen.DriverPostgres,
		// A database of the test binary's cluster (skips where PostgreSQL
		// is missing), dropped when b ends.
		dsn:       func(b *testing.B, home string) string { return pgtest.DatabaseFor(b, home) },
		rebind:    postgres.Rebind,
		sqlDriver: "pgx",
	}
)

// daemonStore is the option that puts a test daemon's store on drv,
// whatever $KIN_TEST_STORE says.
func (drv benchDriver) daemonStore(b *testing.B) kintest.Option {
	return func(c *daemon.Config) { c.Store = drv.dsn(b, c.Home) }
}

// openBenchStore opens home's store on drv (synchronous is SQLite's: ""
// for the default, FULL) and closes it when b ends.
func openBenchStore(b *testing.B, drv benchDriver, home, synchronous string) store.Store {
	b.Helper()
	st, err := storeopen.Open(context.Background(), drv.dsn(b, home), storeopen.Options{Home: home, Synchronous: synchronous})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeStore(st) })
	return st
}

// closeStore closes st (both drivers' stores close, and more than once).
func closeStore(st store.Store) error {
	if c, ok := st.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// floorDB is a plain database/sql handle on a store's database, for the
// floors, with the driver's placeholders.
type floorDB struct {
	*sql.DB
	rebind func(q string) string
}

// floorDB opens home's database directly (SQLite read-only) and closes it
// when b ends.
func (drv benchDriver) floorDB(b *testing.B, home string) floorDB {
	b.Helper()
	dsn := drv.dsn(b, home)
	if drv.name == storeopen.DriverSQLite {
		dsn = "file:" + filepath.Join(home, "kin.db") + "?_pragma=query_only(1)"
	}
	db, err := sql.Open(drv.sqlDriver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return floorDB{DB: db, rebind: drv.rebind}
}

// registerFloor measures drv's floor for registrations and returns it in
// transactions per second: SQLite's raw FULL commits (one row each,
// single-threaded, as BenchmarkRegister's floor), PostgreSQL's pgbench
// simple-update from benchClients clients on the same server.
func (drv benchDriver) registerFloor(b *testing.B) float64 {
	if drv.name == storeopen.DriverSQLite {
		return benchRawInsert(b, "FULL")
	}
	return pgbenchSimpleUpdate(b)
}

// floorName names registerFloor's sub-benchmark.
func (drv benchDriver) floorName() string {
	if drv.name == storeopen.DriverSQLite {
		return "floor-sqlite-FULL"
	}
	return "floor-pgbench-simple-update-c64"
}

// pgbenchSeconds is how long each pgbench run lasts (-T).
const pgbenchSeconds = 3

// pgbenchTPS is pgbench's rate, "tps = 1234.5 (without initial connection
// time)".
var pgbenchTPS = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)

// pgbenchSimpleUpdate runs pgbench's built-in simple-update script (one
// UPDATE, one SELECT and one INSERT per durable transaction) from
// benchClients clients, two threads, against a scale-1 database of the
// test binary's cluster, pgbenchSeconds per iteration, and reports the
// mean rate as tps. pgbench is the cluster's own (pgtest.Bindir).
func pgbenchSimpleUpdate(b *testing.B) float64 {
	pgbench := filepath.Join(pgtest.Bindir(b), "pgbench")
	dsn := pgtest.NewDatabase(b)
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, pgbench, append(args, dsn)...).CombinedOutput()
		if err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("-i", "-q", "-s", "1")
	var sum float64
	n := 0
	for b.Loop() {
		out := run("-b", "simple-update", "-c", strconv.Itoa(benchClients), "-j", "2", "-T", strconv.Itoa(pgbenchSeconds), "-n")
		m := pgbenchTPS.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("no tps in pgbench's output:\n%s", out)
		}
		tps, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			b.Fatal(err)
		}
		sum += tps
		n++
	}
	tps := sum / float64(n)
	b.ReportMetric(0, "ns/op") // an iteration is a pgbench run: tps says it
	b.ReportMetric(tps, "tps")
	return tps
}

// reportXFloor reports value ÷ floor as x-floor, when the floor ran.
func reportXFloor(b *testing.B, value, floor float64) {
	if floor > 0 {
		b.ReportMetric(value/floor, "x-floor")
	}
}

// BenchmarkDrivers runs, for each store driver in turn (store=sqlite,
// store=postgres), the registry's benchmarks that depend on the store:
//
//   - Register: registrations/s through store.Update from 64 goroutines
//     and through the API from 64 clients (a daemon on that store), each
//     with x-floor against the driver's floor in the same run;
//   - SpawnThroughput: BenchmarkSpawnThroughput on a daemon on that store;
//   - forest/Ancestors and forest/Subtree: BenchmarkAncestors and
//     BenchmarkSubtree on 100,010 agents loaded into that store.
//
// Each driver is a sub-benchmark rather than a level added to the
// benchmarks above, so their names, and docs/PERFORMANCE.md's commands
// that pick sub-benchmarks by them, keep meaning what they meant. Run it
// with a count -benchtime (-benchtime=3x): about 6 minutes here. A
// PostgreSQL sub-benchmark skips only where the server is missing
// (package pgtest), and fails under KIN_TEST_REQUIRE_POSTGRES=1.
func BenchmarkDrivers(b *testing.B) {
	for _, drv := range []benchDriver{sqliteDriver, postgresDriver} {
		b.Run("store="+drv.name, func(b *testing.B) {
			b.Run("Register", func(b *testing.B) { benchDriverRegister(b, drv) })
			b.Run("SpawnThroughput", func(b *testing.B) { benchSpawnThroughput(b, drv.daemonStore(b)) })
			// A level of its own, so that a run that picks other
			// sub-benchmarks does not load the forest.
			b.Run("forest", func(b *testing.B) {
				f := loadForest(b, drv)
				b.Run("Ancestors", func(b *testing.B) { benchAncestors(b, f) })
				b.Run("Subtree", func(b *testing.B) { benchSubtree(b, f) })
			})
		})
	}
}

// benchDriverRegister is BenchmarkRegister's store-update-c64 and
// api-unix-c64 on drv, with drv's floor.
func benchDriverRegister(b *testing.B, drv benchDriver) {
	var floor float64 // the floor's transactions per second
	b.Run(drv.floorName(), func(b *testing.B) { floor = drv.registerFloor(b) })
	b.Run(fmt.Sprintf("store-update-c%d", benchClients), func(b *testing.B) {
		st := openBenchStore(b, drv, kintest.TempHome(b), "")
		reportXFloor(b, benchStoreRegister(b, st, benchClients), floor)
	})
	// The same through store.UpdateDeferrable, as the registry registers:
	// on PostgreSQL the insert rides with the next statement.
	b.Run(fmt.Sprintf("store-update-deferrable-c%d", benchClients), func(b *testing.B) {
		st := openBenchStore(b, drv, kintest.TempHome(b), "")
		update := func(ctx context.Context, fn func(store.Tx) error) error { return store.UpdateDeferrable(ctx, st, fn) }
		reportXFloor(b, benchStoreRegisterWith(b, st, update, benchClients), floor)
	})
	b.Run(fmt.Sprintf("api-unix-c%d", benchClients), func(b *testing.B) {
		d := kintest.StartDaemon(b, kintest.WithProfile(unlimitedProfile(b)), drv.daemonStore(b))
		trips0, counted := d.WriterRoundTrips()
		rate := benchAPIRegister(b, d.Client, benchClients)
		if trips, _ := d.WriterRoundTrips(); counted {
			// The writer's, per registration: on PostgreSQL the parent's
			// chain is remembered and checked with the next statement.
			b.ReportMetric(float64(trips-trips0)/float64(benchOps(b, minRegistrations)), "round-trips/op")
		}
		reportXFloor(b, rate, floor)
	})
}
