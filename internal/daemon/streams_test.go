package daemon_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	for i := range quota.MaxStreams {
		sc := c
		if i == 0 {
			sc = first
		}
		wg.Go(func() { as.Logs(sc, kin.LogsRequest{ID: a.ID, Follow: true}, func([]byte) error { return nil }) })
	}
	rateLimited := func(err error) bool {
		var ke *kin.Error
		return errors.As(err, &ke) && ke.Code == kin.ECodeRateLimited && ke.RetryAfter > 0
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
