package peer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/peer"
	"github.com/kin-agents/kin/kin"
)

// TestPeerRequests: a request signed with the key derived from the
// daemon's log key passes its API's token check on a peer route, once;
// anything else (another route, another key, an altered or old request, a
// replay) is refused.
func TestPeerRequests(t *testing.T) {
	d := kintest.StartDaemon(t, kintest.WithHTTP(), kintest.WithHostName("here"))
	ctx := context.Background()
	ag, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "no-process", Responsible: "test"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := auditlog.LoadKey(filepath.Join(d.Home, "keys", "log"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	fleet := peer.NewAuth("a", key.Derive(peer.Label), nil)
	logs := "/v1/agents/" + ag.ID.String() + "/logs"
	base := "http://" + d.HTTPAddr()

	newReq := func(path string) *http.Request {
		r, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	send := func(r *http.Request) (int, httpapi.ErrorBody) {
		t.Helper()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b httpapi.ErrorBody
		body, _ := io.ReadAll(resp.Body)
		json.Unmarshal(body, &b)
		if tr := resp.Trailer.Get(httpapi.LogsErrorTrailer); tr != "" {
			json.Unmarshal([]byte(tr), &b) // a log stream's error comes after its headers
		}
		return resp.StatusCode, b
	}
	signed := func(a *peer.Auth, path string) *http.Request {
		r := newReq(path)
		a.Sign(r, "here")
		return r
	}

	// Through the token check: the log route answers (the agent has no
	// process, so no log).
	r := signed(fleet, logs)
	if st, b := send(r); st != http.StatusOK || !strings.Contains(b.Message, "has no log") {
		t.Errorf("signed GET %s: %d %+v, want the route's own answer", logs, st, b)
	}
	// The other peer route: a child's checked result, for its parent's host.
	if st, b := send(signed(fleet, "/v1/agents/"+ag.ID.String()+"/handoff")); st != http.StatusBadRequest || !strings.Contains(b.Message, "hands no result") {
		t.Errorf("signed GET handoff: %d %+v, want the route's own answer", st, b)
	}
	// The same request again: a replay.
	again := newReq(logs)
	again.Header.Set(peer.Header, r.Header.Get(peer.Header))
	if st, b := send(again); st != http.StatusUnauthorized || !strings.Contains(b.Message, "replayed") {
		t.Errorf("replayed: %d %+v", st, b)
	}
	for name, req := range map[string]*http.Request{
		"another key":       signed(peer.NewAuth("a", other.Derive(peer.Label), nil), logs),
		"another label":     signed(peer.NewAuth("a", key.Derive("something else"), nil), logs),
		"two minutes old":   signed(peer.NewAuth("a", key.Derive(peer.Label), func() time.Time { return time.Now().Add(-2 * time.Minute) }), logs),
		"no signature part": func() *http.Request { r := newReq(logs); r.Header.Set(peer.Header, "a here 1 2"); return r }(),
		// Signed for another host of the fleet (captured on its way
		// there, sent here): that host's nonces are not this one's.
		"for another host": func() *http.Request { r := newReq(logs); fleet.Sign(r, "there"); return r }(),
	} {
		if st, b := send(req); st != http.StatusUnauthorized || b.Code != kin.ECodeUnauthorized {
			t.Errorf("%s: %d %+v, want 401", name, st, b)
		}
	}
	// Signed for one path, sent to another.
	moved := signed(fleet, logs)
	moved.URL.Path = "/v1/agents/" + (ag.ID + 1).String() + "/logs"
	if st, b := send(moved); st != http.StatusUnauthorized {
		t.Errorf("signature moved to another path: %d %+v", st, b)
	}
	// A peer may call nothing but the peer routes, and acts for nobody.
	for _, path := range []string{"/v1/status", "/v1/agents", "/metrics", "/v1/agents/" + ag.ID.String() + "/logs/x"} {
		if st, b := send(signed(fleet, path)); st != http.StatusForbidden || !strings.Contains(b.Message, "another host may only read") {
			t.Errorf("signed GET %s: %d %+v, want 403", path, st, b)
		}
	}
	actAs := newReq(logs)
	actAs.Header.Set(kin.HeaderActAs, ag.ID.String())
	fleet.Sign(actAs, "here")
	if st, b := send(actAs); st != http.StatusForbidden {
		t.Errorf("signed, acting as an agent: %d %+v", st, b)
	}
}

// TestPeerReplayAfterRestart: the nonces a host accepted are in its
// memory, so a request signed before it started (accepted, perhaps, by its
// previous run within the window) is refused by the new one, and a request
// signed after it started is accepted once.
func TestPeerReplayAfterRestart(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	a := peer.NewAuth("a", key, clock)
	here := peer.NewAuth("here", key, clock)
	req := func() *http.Request {
		r, err := http.NewRequest("GET", "http://here.example/v1/agents/7/logs", nil)
		if err != nil {
			t.Fatal(err)
		}
		a.Sign(r, "here")
		r.RequestURI = r.URL.RequestURI() // as the server sees it
		return r
	}
	r := req()
	if host, err := here.Verify(r); err != nil || host != "a" {
		t.Fatalf("first run: Verify = %q, %v", host, err)
	}
	now = now.Add(10 * time.Second) // the host restarts, well within the window
	restarted := peer.NewAuth("here", key, clock)
	if _, err := restarted.Verify(r); err == nil || !strings.Contains(kin.ErrorMessageOf(err), "before this host started") {
		t.Errorf("the captured request replayed after a restart: %v; want refused", err)
	}
	fresh := req()
	if host, err := restarted.Verify(fresh); err != nil || host != "a" {
		t.Errorf("a request signed after the restart: %q, %v", host, err)
	}
	if _, err := restarted.Verify(fresh); err == nil {
		t.Error("the fresh request accepted twice")
	}
}
