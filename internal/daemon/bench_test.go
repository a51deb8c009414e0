package daemon_test

// Benchmarks for the registry, each measured against its floor in the same
// run (STYLE.md convention 12). docs/PERFORMANCE.md has the commands, the
// targets and the numbers.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the floors talk to SQLite directly

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// benchClients is how many concurrent callers the throughput benchmarks
// run: the client SDK keeps up to 64 idle connections per daemon.
const benchClients = 64

// rootEvery makes one registration in rootEvery a root; the others are
// children of the caller's latest root, so the governor's parent checks run.
const rootEvery = 10

// BenchmarkRegister measures registrations per second through the API with
// durable commits (synchronous=FULL), and the floor: single-threaded SQLite
// inserts, one row per commit, with FULL and with NORMAL.
func BenchmarkRegister(b *testing.B) {
	var floor float64 // raw FULL commits/s, from the floor sub-benchmark
	ratio := func(b *testing.B, perSec float64) {
		if floor > 0 {
			b.ReportMetric(perSec/floor, "x-floor")
		}
	}
	b.Run("floor-sqlite-FULL", func(b *testing.B) { floor = benchRawInsert(b, "FULL") })
	b.Run("floor-sqlite-NORMAL", func(b *testing.B) {
		ratio(b, benchRawInsert(b, "NORMAL"))
	})
	b.Run("store-update-c64", func(b *testing.B) {
		ratio(b, benchStoreRegister(b, openBenchStore(b, sqliteDriver, kintest.TempHome(b), "FULL"), benchClients))
	})
	b.Run("api-unix-c1", func(b *testing.B) {
		d := kintest.StartDaemon(b, kintest.WithProfile(unlimitedProfile(b)))
		ratio(b, benchAPIRegister(b, d.Client, 1))
	})
	b.Run("api-unix-c64", func(b *testing.B) {
		d := kintest.StartDaemon(b, kintest.WithProfile(unlimitedProfile(b)))
		ratio(b, benchAPIRegister(b, d.Client, benchClients))
	})
	b.Run("api-tcp-c64", func(b *testing.B) {
		d := kintest.StartDaemon(b, kintest.WithProfile(unlimitedProfile(b)), kintest.WithHTTP())
		c, err := client.New(client.Config{Addr: d.HTTPAddr(), Token: d.OperatorToken()})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ratio(b, benchAPIRegister(b, c, benchClients))
	})
}

// unlimitedProfile writes the default profile without the children limit
// (100 live children per parent) that a long run would hit.
func unlimitedProfile(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.json")
	prof := `{"name": "bench", "max_generation_depth": 10, "max_children": 0,
	"circuit_breaker": {"max_rejections": 10, "window": "1m", "cooldown": "5m"}}`
	if err := os.WriteFile(path, []byte(prof), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// benchRawInsert is the floor for registrations: one agent-like row per
// autocommit, single-threaded, on a WAL database, with database/sql and the
// same driver. It returns commits per second.
func benchRawInsert(b *testing.B, synchronous string) float64 {
	path := filepath.Join(b.TempDir(), "floor.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+synchronous+")")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT NOT NULL,
		parent_id INTEGER NOT NULL, generation INTEGER NOT NULL, responsible TEXT NOT NULL,
		constitution_hash TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL);
		CREATE INDEX agents_parent ON agents (parent_id, id)`); err != nil {
		b.Fatal(err)
	}
	ins, err := db.PrepareContext(ctx, `INSERT INTO agents (name, parent_id, generation, responsible, constitution_hash, status, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	n := benchOps(b, minRegistrations)
	cpu0 := resetTimer(b)
	for i := 0; i < n; i++ {
		if _, err := ins.ExecContext(ctx, fmt.Sprintf("a%d", i), i/rootEvery, 1, "bench@example.org", benchHash, "active", time.Now().UnixNano()); err != nil {
			b.Fatal(err)
		}
	}
	return reportRate(b, n, cpu0, "commits/s")
}

// benchStoreRegister registers agents through st.Update with the writes
// a registration makes (parent read, insert, one or two events; the live
// name's uniqueness is the insert's, through the store's unique index, as
// in the registry) from clients goroutines: the group-committing store
// without HTTP.
func benchStoreRegister(b *testing.B, st store.Store, clients int) float64 {
	return benchStoreRegisterWith(b, st, st.Update, clients)
}

// benchStoreRegisterWith is benchStoreRegister through update: st.Update,
// or store.UpdateDeferrable's as the registry's registrations are made
// (the function is re-runnable: it sets nothing outside tx until the
// Update returns).
//
// On a store that counts its writer's round trips to the server
// (PostgreSQL's), it reports them per registration as round-trips/op.
func benchStoreRegisterWith(b *testing.B, st store.Store, update func(context.Context, func(store.Tx) error) error, clients int) float64 {
	ctx := context.Background()
	now := time.Now().UTC()
	n := benchOps(b, minRegistrations)
	trips, _ := st.(interface{ WriterRoundTrips() int64 })
	var trips0 int64
	if trips != nil {
		trips0 = trips.WriterRoundTrips()
	}
	cpu0 := resetTimer(b)
	err := runPool(n, clients, func(i int, root *kin.AgentID) error {
		var id kin.AgentID
		err := update(ctx, func(tx store.Tx) error {
			a := benchAgent(fmt.Sprintf("a%d", i), now)
			if *root != 0 {
				p, err := tx.AgentGetByID(ctx, *root)
				if err != nil {
					return err
				}
				a.Parent, a.Generation = p.ID, p.Generation+1
			}
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if err != nil {
				return err
			}
			events := []string{kin.EventAgentRegistered}
			if got.Parent != 0 {
				events = append(events, kin.EventChildSpawned)
			}
			for _, typ := range events {
				e, err := kin.NewEvent(typ, got.ID, got.Parent, map[string]any{"agent": got.ID, "parent": got.Parent})
				if err != nil {
					return err
				}
				e.Time = now
				if _, err := tx.EventAppend(ctx, e); err != nil {
					return err
				}
			}
			id = got.ID
			return nil
		})
		if err == nil && *root == 0 {
			*root = id
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if trips != nil {
		b.ReportMetric(float64(trips.WriterRoundTrips()-trips0)/float64(n), "round-trips/op")
	}
	return reportRate(b, n, cpu0, "registrations/s")
}

// benchAPIRegister registers benchOps agents through svc from clients goroutines.
func benchAPIRegister(b *testing.B, svc kin.Service, clients int) float64 {
	ctx := context.Background()
	n := benchOps(b, minRegistrations)
	cpu0 := resetTimer(b)
	err := runPool(n, clients, func(i int, root *kin.AgentID) error {
		req := kin.RegisterRequest{Name: fmt.Sprintf("a%d", i), Parent: *root, ConstitutionHash: benchHash}
		if *root == 0 {
			req.Responsible = "bench@example.org"
		}
		a, err := svc.Register(ctx, req)
		if err != nil {
			return err
		}
		if *root == 0 {
			*root = a.ID
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return reportRate(b, n, cpu0, "registrations/s")
}

// runPool calls op for i in [0, n) from clients goroutines. Each goroutine
// has its own root: op registers a root when *root is 0 and sets it, and
// runPool clears it every rootEvery calls of that goroutine. It returns the
// first error.
func runPool(n, clients int, op func(i int, root *kin.AgentID) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var root kin.AgentID
			for calls := 0; ; calls++ {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if calls%rootEvery == 0 {
					root = 0
				}
				if err := op(i, &root); err != nil {
					once.Do(func() { first = fmt.Errorf("op %d: %w", i, err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// resetTimer resets b's timer and returns the process's CPU time so far.
func resetTimer(b *testing.B) time.Duration {
	b.ResetTimer()
	return proctest.CPU()
}

// reportCPU reports the process's CPU time per operation since cpu0 in
// milliseconds (cpu-ms/op): the daemon and its clients run in the
// benchmark's process.
func reportCPU(b *testing.B, n int, cpu0 time.Duration) {
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Millisecond)/float64(n), "cpu-ms/op")
}

// reportRate reports n operations per second of the timed part under unit
// (and ns/op for n operations), and the process's CPU time per operation
// since cpu0 (cpu-us/op): on a shared machine that moves much less with
// the load than the rate does.
func reportRate(b *testing.B, n int, cpu0 time.Duration, unit string) float64 {
	nsPerOp(b, n)
	b.ReportMetric(float64(proctest.CPU()-cpu0)/float64(time.Microsecond)/float64(n), "cpu-us/op")
	rate := float64(n) / b.Elapsed().Seconds()
	b.ReportMetric(rate, unit)
	return rate
}

// BenchmarkAncestors measures the responsibility chain of an agent at
// generation 10 in a store of 100,010 agents: through the API, straight
// from the store, and the floor, a single-row SELECT by primary key.
func BenchmarkAncestors(b *testing.B) { benchAncestors(b, loadForest(b, sqliteDriver)) }

// benchAncestors is BenchmarkAncestors on f.
func benchAncestors(b *testing.B, f *forest) {
	ctx := context.Background()
	var floor float64 // ns per floor query
	ratio := func(b *testing.B, n int, cpu0 time.Duration) {
		reportCPU(b, n, cpu0)
		if floor > 0 {
			b.ReportMetric(nsPerOp(b, n)/floor, "x-floor")
		}
	}
	check := func(b *testing.B, got []*kin.Agent, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != forestDepth+1 {
			b.Fatalf("%d ancestors, want %d", len(got), forestDepth+1)
		}
	}
	b.Run("floor-select-pk", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minLookups)
		for i := 0; i < n; i++ {
			if _, err := selectAgent(ctx, f.db, f.deep[i%len(f.deep)]); err != nil {
				b.Fatal(err)
			}
		}
		floor = nsPerOp(b, n)
		reportCPU(b, n, cpu0)
	})
	b.Run("store", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minLookups)
		for i := 0; i < n; i++ {
			got, err := f.store.AgentAncestors(ctx, f.deep[i%len(f.deep)])
			check(b, got, err)
		}
		ratio(b, n, cpu0)
	})
	b.Run("api-unix", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minLookups)
		for i := 0; i < n; i++ {
			got, err := f.d.Client.Ancestors(ctx, f.deep[i%len(f.deep)])
			check(b, got, err)
		}
		ratio(b, n, cpu0)
	})
}

// BenchmarkSubtree measures the tree of a root with 10,000 descendants in a
// store of 100,010 agents: through the API (Tree), in the daemon's process
// (Daemon.Tree), straight from the store's recursive query,
// the JSON round trip alone, and two floors: the bare recursive CTE returning only ids, and reading
// 10,001 whole rows by primary-key range.
func BenchmarkSubtree(b *testing.B) { benchSubtree(b, loadForest(b, sqliteDriver)) }

// benchSubtree is BenchmarkSubtree on f.
func benchSubtree(b *testing.B, f *forest) {
	ctx := context.Background()
	want := forestDescendants + 1
	var floor float64 // ns per floor-scan query
	ratio := func(b *testing.B, n int, cpu0 time.Duration) {
		reportCPU(b, n, cpu0)
		if floor > 0 {
			b.ReportMetric(nsPerOp(b, n)/floor, "x-floor")
		}
	}
	b.Run("floor-cte-ids", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			n, err := subtreeIDs(ctx, f.db, f.roots[i%len(f.roots)])
			if err != nil || n != want {
				b.Fatalf("%d ids, %v", n, err)
			}
		}
		reportCPU(b, n, cpu0)
	})
	b.Run("floor-scan-rows", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			n, err := scanRows(ctx, f.db, int64(i%len(f.roots))*int64(want), want)
			if err != nil || n != want {
				b.Fatalf("%d rows, %v", n, err)
			}
		}
		floor = nsPerOp(b, n)
		reportCPU(b, n, cpu0)
	})
	b.Run("store", func(b *testing.B) {
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			got, err := f.store.AgentSubtree(ctx, f.roots[i%len(f.roots)])
			if err != nil || len(got) != want {
				b.Fatalf("%d agents, %v", len(got), err)
			}
		}
		ratio(b, n, cpu0)
	})
	b.Run("daemon", func(b *testing.B) {
		// The service in process: the in-memory lineage walk, the rows by
		// id from the store, and the nesting; no HTTP, no JSON.
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			got, err := f.d.Daemon.Tree(ctx, f.roots[i%len(f.roots)])
			if err != nil || len(got) != 1 || len(got[0].Children) != 10 {
				b.Fatalf("tree %v, %v", len(got), err)
			}
		}
		ratio(b, n, cpu0)
	})
	b.Run("json-only", func(b *testing.B) {
		// What the API adds besides the store and the socket: the daemon
		// nests and encodes the tree, the client decodes it.
		agents, err := f.store.AgentSubtree(ctx, f.roots[0])
		if err != nil {
			b.Fatal(err)
		}
		size := 0 // bytes on the wire
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			data, err := json.Marshal(registry.BuildTree(agents, f.roots[0]))
			if err != nil {
				b.Fatal(err)
			}
			var got []*kin.TreeNode
			if err := json.Unmarshal(data, &got); err != nil || len(got) != 1 {
				b.Fatalf("tree %d, %v", len(got), err)
			}
			size = len(data)
		}
		b.ReportMetric(float64(size), "wire-bytes")
		ratio(b, n, cpu0)
	})
	b.Run("columns-only", func(b *testing.B) {
		// The same for the compact wire form (httpapi.TreeColumnsType),
		// what client.Tree asks for.
		agents, err := f.store.AgentSubtree(ctx, f.roots[0])
		if err != nil {
			b.Fatal(err)
		}
		size := 0 // bytes on the wire
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			data := httpapi.EncodeTreeColumns(registry.BuildTree(agents, f.roots[0])).AppendJSON(nil)
			got, err := httpapi.DecodeTree(httpapi.TreeColumnsType, bytes.NewReader(data))
			if err != nil || len(got) != 1 {
				b.Fatalf("tree %d, %v", len(got), err)
			}
			size = len(data)
		}
		b.ReportMetric(float64(size), "wire-bytes")
		ratio(b, n, cpu0)
	})
	b.Run("api-unix", func(b *testing.B) {
		// client.Tree: the compact form v2 (the store's rows, streamed).
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			got, err := f.d.Client.Tree(ctx, f.roots[i%len(f.roots)])
			if err != nil || len(got) != 1 || len(got[0].Children) != 10 {
				b.Fatalf("tree %v, %v", len(got), err)
			}
		}
		ratio(b, n, cpu0)
	})
	// A client that asks for one form by Accept over the socket.
	viaAccept := func(b *testing.B, accept string) {
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.d.SocketPath())
		}}}
		defer hc.CloseIdleConnections()
		cpu0 := resetTimer(b)
		n := benchOps(b, minTrees)
		for i := 0; i < n; i++ {
			req, err := http.NewRequestWithContext(ctx, "GET", "http://kin/v1/agents/"+f.roots[i%len(f.roots)].String()+"/tree", nil)
			if err != nil {
				b.Fatal(err)
			}
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			got, err := httpapi.DecodeTree(resp.Header.Get("Content-Type"), resp.Body)
			resp.Body.Close()
			if err != nil || len(got) != 1 || len(got[0].Children) != 10 {
				b.Fatalf("tree %v, %v", len(got), err)
			}
		}
		ratio(b, n, cpu0)
	}
	b.Run("api-unix-v1", func(b *testing.B) {
		// The compact columnar form v1 (what client.Tree asked for before
		// the form v2).
		viaAccept(b, httpapi.TreeColumnsType)
	})
	b.Run("api-unix-json", func(b *testing.B) {
		// What a client that predates the compact forms gets: the nested
		// JSON of []kin.TreeNode.
		viaAccept(b, "")
	})
}

// The registry's benchmarks and the supervisor's run in one command:
//
//	go test -run='^$' -bench='Register|Ancestors|Subtree|Spawn|Cascade|Memory' -benchtime=3x -count=1 ./internal/daemon/
//
// The supervisor's iterations are batches (a count -benchtime suits them);
// under a count -benchtime each registry sub-benchmark does at least its
// minimum below, whatever b.N is, and reports ns/op for what it did. Under a
// time -benchtime (-benchtime=3s) they run b.N operations as usual.
const (
	minRegistrations = 2000 // BenchmarkRegister: registrations (or raw commits) per sub-benchmark
	minLookups       = 2000 // BenchmarkAncestors: chains read
	minTrees         = 10   // BenchmarkSubtree: subtrees read
)

// benchOps is how many operations a registry sub-benchmark runs: b.N, or
// at least least under a count -benchtime (-benchtime=3x).
func benchOps(b *testing.B, least int) int {
	if f := flag.Lookup("test.benchtime"); f != nil && strings.HasSuffix(f.Value.String(), "x") {
		return max(b.N, least)
	}
	return b.N
}

// nsPerOp is the timed part's nanoseconds per operation for n operations,
// and reports it as ns/op when n is not b.N.
func nsPerOp(b *testing.B, n int) float64 {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(n)
	if n != b.N {
		b.ReportMetric(ns, "ns/op")
	}
	return ns
}

// selectAgent is the floor of a lookup: one row by primary key, every
// column the store reads.
func selectAgent(ctx context.Context, db floorDB, id kin.AgentID) (*kin.Agent, error) {
	var a kin.Agent
	var wallet sql.NullString
	var created, updated, blocked int64
	err := db.QueryRowContext(ctx, db.rebind(`SELECT id, name, role, parent_id, generation, responsible, wallet,
		constitution_hash, capability_hash, scope, self_modifying, life, status, state,
		created_at, created_by, updated_at, spawn_blocked_until FROM agents WHERE id = ?`), id).Scan(
		&a.ID, &a.Name, &a.Role, &a.Parent, &a.Generation, &a.Responsible, &wallet,
		&a.ConstitutionHash, &a.CapabilityHash, &a.Scope, &a.SelfModifying, &a.Life, &a.Status, &a.State,
		&created, &a.CreatedBy, &updated, &blocked)
	return &a, err
}

// subtreeIDs runs the bare recursive walk below id and counts the ids.
func subtreeIDs(ctx context.Context, db floorDB, id kin.AgentID) (int, error) {
	rows, err := db.QueryContext(ctx, db.rebind(`WITH RECURSIVE sub(id) AS (
			SELECT id FROM agents WHERE id = ?
			UNION ALL
			SELECT a.id FROM agents a JOIN sub s ON a.parent_id = s.id
		) SELECT id FROM sub`), id)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var got int64
		if err := rows.Scan(&got); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// scanRows reads n whole agent rows by primary-key range from after: the
// cost of getting that many rows out of the database into Go, with no tree walk.
func scanRows(ctx context.Context, db floorDB, after int64, n int) (int, error) {
	rows, err := db.QueryContext(ctx, db.rebind(`SELECT id, name, role, parent_id, generation, responsible, wallet,
		constitution_hash, capability_hash, scope, self_modifying, life, status, state,
		created_at, created_by, updated_at, spawn_blocked_until FROM agents WHERE id > ? ORDER BY id LIMIT ?`), after, n)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var a kin.Agent
		var wallet sql.NullString
		var created, updated, blocked int64
		if err := rows.Scan(&a.ID, &a.Name, &a.Role, &a.Parent, &a.Generation, &a.Responsible, &wallet,
			&a.ConstitutionHash, &a.CapabilityHash, &a.Scope, &a.SelfModifying, &a.Life, &a.Status, &a.State,
			&created, &a.CreatedBy, &updated, &blocked); err != nil {
			return got, err
		}
		got++
	}
	return got, rows.Err()
}
