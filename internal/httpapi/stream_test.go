package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
)

// TestQuietStreamAnswersAtOnceAndKeepsAlive follows an event stream that
// has nothing to say: the headers arrive at once and keep-alives follow.
func TestQuietStreamAnswersAtOnceAndKeepsAlive(t *testing.T) {
	d := kintest.StartDaemon(t)
	srv := httpapi.New(d.Daemon, "tok", nil)
	srv.KeepAlive = 20 * time.Millisecond
	ts := httptest.NewServer(srv.Handler(true))
	defer ts.Close()
	for _, tc := range []struct{ accept, keepAlive string }{
		{"text/event-stream", ": keep-alive"},
		{"application/x-ndjson", ""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/events?follow=true&since=1000", nil)
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Accept", tc.accept)
		resp, err := http.DefaultClient.Do(req) // returns once headers arrive
		if err != nil {
			t.Fatalf("%s: %v", tc.accept, err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.accept) {
			t.Fatalf("%s: %d %s", tc.accept, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != tc.keepAlive {
			t.Fatalf("%s: first line %q, %v; want the keep-alive %q", tc.accept, line, err, tc.keepAlive)
		}
		resp.Body.Close()
		cancel()
	}
	// A bad filter is still a plain error, not a 200 stream.
	req, _ := http.NewRequest("GET", ts.URL+"/v1/events?follow=true&limit=10001", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("bad limit: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
}
