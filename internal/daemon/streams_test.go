package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/agentsock"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/kin"
)

// TestLogStreamsPerAgent: an agent holds at most quota.MaxStreams long
// answers open (logs, followed events, followed inbox); past that each is
// refused with rate_limited and a retry_after, until one ends. The
// operator is not counted.
func TestLogStreamsPerAgent(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnAgent(t, d.Client, "reader", 0, "sleep")
	as := d.Client.ActingAs(a.ID.String())
	c, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	first, cancelFirst := context.WithCancel(c)
	// How each held stream ended, said when the test fails (a stream that
	// ended early is one fewer held).
	var mu sync.Mutex
	var ended []string
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if t.Failed() {
			t.Logf("held streams that ended: %q", ended)
		}
	})
	rateLimited := func(err error) bool {
		var ke *kin.Error
		return errors.As(err, &ke) && ke.Code == kin.ECodeRateLimited && ke.RetryAfter > 0
	}
	for i := range quota.MaxStreams {
		sc := c
		if i == 0 {
			sc = first
		}
		wg.Go(func() {
			// The probe below holds a slot while it reads, so a stream
			// that starts meanwhile can be refused: it tries again (CI
			// once saw stream 2 refused, and the probe then never was).
			err := as.Logs(sc, kin.LogsRequest{ID: a.ID, Follow: true}, func([]byte) error { return nil })
			for rateLimited(err) && sc.Err() == nil {
				select {
				case <-sc.Done():
				case <-time.After(10 * time.Millisecond):
				}
				err = as.Logs(sc, kin.LogsRequest{ID: a.ID, Follow: true}, func([]byte) error { return nil })
			}
			mu.Lock()
			ended = append(ended, fmt.Sprintf("stream %d at %s: %v", i, time.Now().Format("15:04:05.000"), err))
			mu.Unlock()
		})
	}
	read := func() error { return as.Logs(ctx, kin.LogsRequest{ID: a.ID}, func([]byte) error { return nil }) }
	kintest.WaitFor(t, 20*time.Second, "the streams to be held", func() bool { return rateLimited(read()) })
	if err := as.Inbox(ctx, kin.InboxRequest{Follow: true}, func(kin.Message) error { return nil }); !rateLimited(err) {
		t.Fatalf("a followed inbox past the limit: %v, want rate_limited", err)
	}
	if err := as.FollowEvents(ctx, kin.EventFilter{}, func(kin.Event) error { return nil }); !rateLimited(err) {
		t.Fatalf("followed events past the limit: %v, want rate_limited", err)
	}
	if err := d.Client.Logs(ctx, kin.LogsRequest{ID: a.ID}, func([]byte) error { return nil }); err != nil {
		t.Fatalf("the operator's read: %v", err)
	}
	cancelFirst()
	kintest.WaitFor(t, 20*time.Second, "an ended stream to make room", func() bool { return read() == nil })
}

// TestAgentSocketConnectionCap: an agent's socket holds at most
// agentsock.MaxConns connections open at once; past that a new one is
// closed as soon as it is accepted (found by attacking issue 21's work:
// idle keep-alive connections, one descriptor each, were not bounded).
// Every connection is asked one request: a held one answers it, a refused
// one is closed.
func TestAgentSocketConnectionCap(t *testing.T) {
	d := kintest.StartDaemon(t)
	a := spawnAgent(t, d.Client, "holder", 0, "sleep")
	sock := filepath.Join(d.Home, "ctx", "agent", a.Name+".sock")
	const tries = agentsock.MaxConns + 36
	conns := make([]net.Conn, 0, tries)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range tries {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	var answered, closed int
	for _, c := range conns {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write([]byte("GET /v1/whoami HTTP/1.1\r\nHost: kin\r\n\r\n")); err != nil {
			closed++
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err == nil:
			resp.Body.Close()
			answered++
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			closed++
		default:
			t.Fatalf("connection neither answered nor closed: %v", err)
		}
	}
	if answered != agentsock.MaxConns || closed != tries-agentsock.MaxConns {
		t.Errorf("%d connections held open at once: %d answered, %d closed; want %d answered", tries, answered, closed, agentsock.MaxConns)
	}
}
