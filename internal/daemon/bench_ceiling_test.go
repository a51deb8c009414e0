package daemon_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/proctest"
	"github.com/kin-agents/kin/kin"
)

// BenchmarkSpawnCeiling measures what issue 22's throughput target asks of
// the parts a recorded spawn is made of, put together with nothing of
// kin's own logic between them, from throughputClients goroutines as
// BenchmarkSpawnThroughput spawns: the most agents a second that a daemon
// built from exactly these parts could start on this machine. Each
// sub-benchmark adds one part to the one before, throughputBatch agents an
// iteration, and reports agents/s, this process's CPU per agent and the
// agents' own (their groups' cpu.stat):
//
//   - start: the raw floor of BenchmarkSpawnThroughput, a fork and exec of
//     sleep into a fresh cgroup (mkdir, open, clone3 into it);
//   - +record: and one durable commit of the agent's row (SQLite, WAL,
//     synchronous=FULL), group-committed across the clients as kin's
//     store commits, and one HTTP/1.1 round trip on a Unix socket with a
//     small JSON request and answer, the start made in the server's
//     handler (issue 22's composite floor, under load);
//   - +folders: and, in the handler too, the agent's part of seed 001's
//     agent filesystem as ctxfs makes it for a spawn (its session in its
//     own uid's home, its folder in its parent's context/child/: what
//     BenchmarkSpawnFolders times alone).
//
// x-start is each row's rate over the start row's in the same run: the
// most BenchmarkSpawnThroughput's x-raw could be with these parts alone.
func BenchmarkSpawnCeiling(b *testing.B) {
	g := newGroupCheck(b)
	var startRate float64
	for _, parts := range []string{"start", "+record", "+folders"} {
		b.Run(parts, func(b *testing.B) {
			var spent, cpu, agentsCPU time.Duration
			n := 0
			for iter := 0; b.Loop(); iter++ {
				rg := newRawGroup(b, g, "ceil")
				start := func(i int) error {
					_, _, err := rg.start("r" + strconv.Itoa(i))
					return err
				}
				spawn := start
				if parts != "start" {
					srv := newCeilingServer(b, start, parts == "+folders")
					spawn = srv.spawn
				}
				t0, cpu0, acpu0 := time.Now(), proctest.CPU(), cgroupCPU(rg.dir)
				if err := fanOut(throughputBatch, throughputClients, spawn); err != nil {
					b.Fatal(err)
				}
				spent += time.Since(t0)
				cpu += proctest.CPU() - cpu0
				agentsCPU += cgroupCPU(rg.dir) - acpu0
				n += throughputBatch
				if err := rg.close(); err != nil {
					b.Fatal(err)
				}
			}
			rate := float64(n) / spent.Seconds()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(rate, "agents/s")
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(n), "cpu-ms/agent")
			b.ReportMetric(float64(agentsCPU)/float64(time.Millisecond)/float64(n), "agents-cpu-ms/agent")
			if parts == "start" {
				startRate = rate
			} else if startRate > 0 {
				b.ReportMetric(rate/startRate, "x-start")
			}
		})
	}
}

// ceilingServer is BenchmarkSpawnCeiling's daemon of bare parts: an HTTP
// server on a Unix socket whose handler makes the agent's folders (when
// folders is set), starts its process and commits its row, then answers.
type ceilingServer struct {
	client  *http.Client
	commits chan chan error
	fs      *ctxfs.FS
	parents []ctxfs.Session
}

func newCeilingServer(b *testing.B, start func(i int) error, folders bool) *ceilingServer {
	b.Helper()
	dir := b.TempDir()
	s := &ceilingServer{commits: make(chan chan error, throughputClients)}
	s.startCommitter(b, filepath.Join(dir, "ceiling.db"))
	if folders {
		// As the daemon's: no fsync (the tree follows the store), and the
		// directories that get one subdirectory per agent spread over the
		// file system's block groups (runner.prepareDirs).
		root := filepath.Join(dir, "ctx")
		for _, d := range []string{dir, root, filepath.Join(root, "home")} {
			if err := os.MkdirAll(d, 0o711); err != nil {
				b.Fatal(err)
			}
			if err := ctxfs.SpreadDir(d); err != nil {
				b.Fatal(err)
			}
		}
		f, err := ctxfs.Open(root, ctxfs.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		s.fs = f
		for k := range spawnParents {
			p := ctxfs.Session{Owner: ceilingOwner(k), Agent: "p" + strconv.Itoa(k), ID: ctxfs.DefaultSession}
			if err := f.CreateSession(ctxfs.SessionParams{Session: p, AgentID: kin.AgentID(k + 1), Now: time.Now()}); err != nil {
				b.Fatal(err)
			}
			s.parents = append(s.parents, p)
		}
	}
	sock := filepath.Join(dir, "ceiling.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	key := make([]byte, 120) // the agent's key file, as a spawn writes one
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		i, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err == nil && s.fs != nil {
			err = s.folders(i, key)
		}
		if err == nil {
			err = start(i)
		}
		if err == nil {
			err = s.commit()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":1,"name":"ceiling","pid":1}`)
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	tr := &http.Transport{MaxIdleConnsPerHost: throughputClients, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	b.Cleanup(tr.CloseIdleConnections)
	s.client = &http.Client{Transport: tr}
	return s
}

// ceilingOwner is agent i's owner: a uid of its own where this is root, as
// a root daemon's agents have, else this process's.
func ceilingOwner(i int) ctxfs.Owner {
	if os.Geteuid() != 0 {
		return ctxfs.Owner{UID: os.Geteuid(), GID: os.Getegid()}
	}
	return ctxfs.Owner{UID: 40000 + i, GID: 40000 + i}
}

// spawn is one agent through the server: a request, the handler's work,
// the answer.
func (s *ceilingServer) spawn(i int) error {
	resp, err := s.client.Post("http://ceiling/v1/spawn?i="+strconv.Itoa(i), "application/json",
		strings.NewReader(`{"name":"ceiling","command":["/bin/sleep","3600"],"parent":1}`))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	return err
}

// folders makes agent i's session and its folder in its parent's session
// (runner.prepareCtx's part of a spawn, as BenchmarkSpawnFolders).
func (s *ceilingServer) folders(i int, key []byte) error {
	id := kin.AgentID(i + 100)
	p := s.parents[i%len(s.parents)]
	c := ctxfs.Session{Owner: ceilingOwner(i + 100), Agent: "c" + strconv.Itoa(i), ID: ctxfs.DefaultSession}
	ref := ctxfs.ParentRef{Agent: p.Agent, Session: p.ID, Run: "r1"}
	if err := s.fs.CreateSession(ctxfs.SessionParams{Session: c, AgentID: id, Run: "r" + id.String(), Parent: ref, Cwd: "/", Key: key, Now: time.Now()}); err != nil {
		return err
	}
	return s.fs.CreateChildDir(ctxfs.ChildParams{Parent: p, Child: c.Agent, ChildID: id, ChildSession: c.ID})
}

// startCommitter opens the record's database and runs its writer: every
// commit asked meanwhile goes in one transaction, one fsync (group
// commit), as kin's store does.
func (s *ceilingServer) startCommitter(b *testing.B, path string) {
	b.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT NOT NULL, parent_id INTEGER NOT NULL,
		status TEXT NOT NULL, pid INTEGER NOT NULL, created_at INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop); <-done; db.Close() })
	go func() {
		defer close(done)
		var batch []chan error
		n := 0
		for {
			select {
			case c := <-s.commits:
				batch = append(batch[:0], c)
			case <-stop:
				return
			}
		more:
			for {
				select {
				case c := <-s.commits:
					batch = append(batch, c)
				default:
					break more
				}
			}
			err := func() error {
				tx, err := db.Begin()
				if err != nil {
					return err
				}
				defer tx.Rollback()
				for range batch {
					n++
					if _, err := tx.Exec(`INSERT INTO agents (name, parent_id, status, pid, created_at) VALUES (?, ?, ?, ?, ?)`,
						"c"+strconv.Itoa(n), 1, "active", n, time.Now().UnixNano()); err != nil {
						return err
					}
				}
				return tx.Commit()
			}()
			for _, c := range batch {
				c <- err
			}
		}
	}()
}

// commit waits for one row's durable commit.
func (s *ceilingServer) commit() error {
	c := make(chan error, 1)
	s.commits <- c
	return <-c
}
