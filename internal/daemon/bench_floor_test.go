package daemon_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commitFloor is the durable part of issue 22's composite floor: one row
// committed on its own in a SQLite file in WAL mode with synchronous=FULL,
// as kin's store commits (a fresh file beside the daemon's home, so on the
// same file system).
type commitFloor struct {
	db   *sql.DB
	stmt *sql.Stmt
	n    int
}

func newCommitFloor(b *testing.B) *commitFloor {
	b.Helper()
	path := filepath.Join(b.TempDir(), "floor.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, at TEXT NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	stmt, err := db.Prepare("INSERT INTO t (name, at) VALUES (?, ?)")
	if err != nil {
		b.Fatal(err)
	}
	return &commitFloor{db: db, stmt: stmt}
}

// commit times one durable commit of one row.
func (c *commitFloor) commit() (time.Duration, error) {
	c.n++
	t0 := time.Now()
	_, err := c.stmt.Exec(fmt.Sprintf("row-%d", c.n), t0.UTC().Format(time.RFC3339Nano))
	return time.Since(t0), err
}

// roundTripFloor is the request part of the composite floor: one HTTP/1.1
// request with a small JSON body and a small JSON answer, keep-alive, over
// a Unix socket, to a server that does nothing else.
type roundTripFloor struct {
	client *http.Client
}

func newRoundTripFloor(b *testing.B) *roundTripFloor {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "rt.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":1,"name":"floor","pid":1}`)
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	b.Cleanup(tr.CloseIdleConnections)
	return &roundTripFloor{client: &http.Client{Transport: tr}}
}

// roundTrip times one request.
func (r *roundTripFloor) roundTrip() (time.Duration, error) {
	t0 := time.Now()
	resp, err := r.client.Post("http://floor/v1/spawn", "application/json",
		strings.NewReader(`{"name":"floor","command":["/bin/sleep","3600"],"parent":1}`))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t0), err
}
