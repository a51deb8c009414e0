package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kin-agents/kin/client"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// scripted is a kin.Service whose supervisor methods a test scripts. The
// daemon's behaviour is tested in internal/daemon; here the subject is the
// HTTP plumbing between the client SDK and the server: flushing, the error
// trailer, optional bodies, null answers. Methods not scripted panic (the
// embedded interface is nil).
type scripted struct {
	kin.Service
	logs   func(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error
	stops  chan kin.StopRequest
	whoami *kin.Agent
}

func (s *scripted) Agent(_ context.Context, id kin.AgentID) (*kin.Agent, error) {
	if id == 99 {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return &kin.Agent{ID: id}, nil
}

func (s *scripted) Logs(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
	return s.logs(ctx, req, fn)
}

func (s *scripted) Stop(_ context.Context, req kin.StopRequest) ([]*kin.Agent, error) {
	s.stops <- req
	return []*kin.Agent{{ID: req.ID}}, nil
}

func (s *scripted) Whoami(context.Context) (*kin.Agent, error) { return s.whoami, nil }

// serveScripted serves svc over HTTP and returns a client SDK for it.
func serveScripted(t *testing.T, svc kin.Service) (*client.Client, string) {
	t.Helper()
	ts := httptest.NewServer(httpapi.New(svc, "tok", nil).Handler(true))
	t.Cleanup(ts.Close)
	c, err := client.New(client.Config{Addr: ts.URL, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ts.URL
}

// TestLogsStreamFlushesEachChunk: the headers arrive before any output, and
// each chunk reaches the client while the service is still producing.
func TestLogsStreamFlushesEachChunk(t *testing.T) {
	release, quit := make(chan struct{}), make(chan struct{})
	wait := func() error {
		select {
		case <-release:
			return nil
		case <-quit: // the test failed: let the server close
			return errors.New("test over")
		}
	}
	got := make(chan kin.LogsRequest, 1)
	svc := &scripted{logs: func(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
		got <- req
		if err := wait(); err != nil {
			return err
		}
		if err := fn([]byte("one\n")); err != nil {
			return err
		}
		if err := wait(); err != nil {
			return err
		}
		return fn([]byte("two\n"))
	}}
	c, url := serveScripted(t, svc)
	t.Cleanup(func() { close(quit) }) // runs before the server's Close
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Raw HTTP first: the answer starts before the service wrote anything.
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/agents/7/logs?offset=5&follow=true", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, declared := resp.Trailer[httpapi.LogsErrorTrailer]; resp.StatusCode != 200 || !declared ||
		resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("answer %s, headers %v, trailers %v", resp.Status, resp.Header, resp.Trailer)
	}
	if r := <-got; r != (kin.LogsRequest{ID: 7, Offset: 5, Follow: true}) {
		t.Errorf("service got %+v", r)
	}
	release <- struct{}{}
	release <- struct{}{}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "one\ntwo\n" || resp.Trailer.Get(httpapi.LogsErrorTrailer) != "" {
		t.Fatalf("body %q, %v, trailer %v", body, err, resp.Trailer)
	}

	// Then through the SDK, one chunk at a time.
	chunks := make(chan string, 2)
	done := make(chan error, 1)
	go func() {
		done <- c.Logs(ctx, kin.LogsRequest{ID: 7}, func(b []byte) error {
			chunks <- string(b)
			return nil
		})
	}()
	if r := <-got; r != (kin.LogsRequest{ID: 7}) {
		t.Errorf("service got %+v", r)
	}
	release <- struct{}{}
	if s := <-chunks; s != "one\n" {
		t.Fatalf("first chunk %q", s)
	}
	release <- struct{}{} // only once the first chunk has arrived: it was flushed
	if s := <-chunks; s != "two\n" {
		t.Fatalf("second chunk %q", s)
	}
	if err := <-done; err != nil {
		t.Fatalf("Logs = %v, want nil at the end of the stream", err)
	}
}

// TestLogsStreamError: an error before the stream is a plain error answer;
// one after it started comes in the trailer, and the SDK returns it.
func TestLogsStreamError(t *testing.T) {
	svc := &scripted{logs: func(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
		if err := fn([]byte("partial")); err != nil {
			return err
		}
		return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
	}}
	c, _ := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := c.Logs(ctx, kin.LogsRequest{ID: 7, Follow: true}, func(b []byte) error { out.Write(b); return nil })
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeUnavailable || ke.Message != "the daemon is shutting down" {
		t.Fatalf("Logs = %v, want the trailer's unavailable error", err)
	}
	if out.String() != "partial" {
		t.Errorf("output %q", out.String())
	}

	called := false
	err = c.Logs(ctx, kin.LogsRequest{ID: 99}, func([]byte) error { called = true; return nil })
	if !errors.As(err, &ke) || ke.Code != kin.ECodeNotFound || called {
		t.Fatalf("Logs of a missing agent = %v (fn called: %v), want not_found", err, called)
	}

	// fn's error ends the stream and is returned as it is.
	stop := errors.New("enough")
	if err := c.Logs(ctx, kin.LogsRequest{ID: 7}, func([]byte) error { return stop }); err != stop {
		t.Fatalf("Logs = %v, want fn's error", err)
	}
}

// TestLogsFollowCancelled: a follower that goes away cancels the service's
// context, and the SDK reports its own context's error.
func TestLogsFollowCancelled(t *testing.T) {
	ended := make(chan error, 1)
	svc := &scripted{logs: func(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
		if err := fn([]byte("x")); err != nil {
			return err
		}
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}}
	c, _ := serveScripted(t, svc)
	ctx, cancel := context.WithCancel(context.Background())
	err := c.Logs(ctx, kin.LogsRequest{ID: 7, Follow: true}, func([]byte) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Logs = %v, want context.Canceled", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the service's context was not cancelled when the client went away")
	}
}

// TestStopBodyIsOptional: grace is passed through as given: absent (each
// agent's own), "0s" (kill at once), or a duration; no body at all is {}.
func TestStopBodyIsOptional(t *testing.T) {
	svc := &scripted{stops: make(chan kin.StopRequest, 1)}
	c, url := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	zero, five := kin.Duration(0), kin.Duration(5*time.Second)
	for _, g := range []*kin.Duration{nil, &zero, &five} {
		out, err := c.Stop(ctx, kin.StopRequest{ID: 3, Grace: g})
		if err != nil || len(out) != 1 || out[0].ID != 3 {
			t.Fatalf("Stop = %v, %v", out, err)
		}
		got := <-svc.stops
		if got.ID != 3 || (got.Grace == nil) != (g == nil) || g != nil && *got.Grace != *g {
			t.Errorf("grace %v arrived as %v", g, got.Grace)
		}
	}
	for _, body := range []string{"", "{}"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/agents/4/stop", bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("stop with body %q: %s", body, resp.Status)
		}
		if got := <-svc.stops; got.ID != 4 || got.Grace != nil {
			t.Errorf("stop with body %q arrived as %+v", body, got)
		}
	}
}

// TestWhoamiNull: the operator is null on the wire and nil in the SDK.
func TestWhoamiNull(t *testing.T) {
	svc := &scripted{}
	c, _ := serveScripted(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := c.Whoami(ctx)
	if err != nil || a != nil {
		t.Fatalf("Whoami = %+v, %v; want nil, nil for the operator", a, err)
	}
	svc.whoami = &kin.Agent{ID: 7, Name: "worker"}
	if a, err = c.Whoami(ctx); err != nil || a == nil || a.ID != 7 {
		t.Fatalf("Whoami = %+v, %v; want agent 7", a, err)
	}
}
