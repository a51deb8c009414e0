package top

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/kin"
)

// TestTopWithDaemon runs the model on a real daemon, through the client as
// the CLI does: the seed tree, a stop, and a registration seen live.
func TestTopWithDaemon(t *testing.T) {
	d := kintest.StartDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range seedTree() {
		req := kin.RegisterRequest{Name: a.Name, Role: a.Role, Parent: a.Parent}
		if a.Parent == 0 {
			req.Responsible = a.Responsible
		}
		if _, err := d.Client.Register(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	h := start(t, d.Client, Options{}, 100, 16)
	h.m.ctx = ctx
	want := strings.Replace(seedScreen, "home /srv/kin", "home "+d.Home, 1)
	if got := h.screen(); got != want {
		t.Errorf("screen:\n%s\nwant:\n%s", got, want)
	}

	h.press("down", "s")
	if got := h.footer(); got != "Stop #2 Data-Collector and its 2 descendants? y/n" {
		t.Errorf("confirmation: %q", got)
	}
	h.press("y")
	if got := h.footer(); got != "Stopped 3 agents: #2 #5 #6" {
		t.Errorf("after y: %q", got)
	}
	for _, name := range []string{"Data-Collector", "Web-Scraper", "API-Fetcher"} {
		if got := h.line(name); !strings.Contains(got, "cancelled") {
			t.Errorf("%s after stop: %q", name, got)
		}
	}
	h.press("end", "p", "y")
	if got := h.line("Peer-Reviewer"); !strings.Contains(got, "suspended") {
		t.Errorf("after suspend: %q (footer %q)", got, h.footer())
	}
	h.press("r", "y")
	if got := h.line("Peer-Reviewer"); strings.Contains(got, "suspended") {
		t.Errorf("after resume: %q (footer %q)", got, h.footer())
	}

	// Live: follow the stream, register an agent, and see it appear.
	followCtx, stopFollow := context.WithCancel(ctx)
	h.m.ctx = followCtx
	followed := make(chan any, 1)
	go func() { followed <- h.m.follow() }()
	defer func() { stopFollow(); <-followed }()
	if _, err := d.Client.Register(ctx, kin.RegisterRequest{Name: "Citation-Checker", Role: "checker", Parent: 4}); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(h.screen(), "Citation-Checker") {
		msg := h.m.waitChange() // blocks until an event comes (the test's deadline bounds it)
		if msg == nil {
			t.Fatalf("no event before the deadline:\n%s", h.screen())
		}
		h.m.Update(msg)
	}
	if got := h.line("Citation-Checker"); !strings.Contains(got, "└── #8 Citation-Checker") {
		t.Errorf("new agent: %q", got)
	}
}
