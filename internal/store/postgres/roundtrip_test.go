package postgres

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/pgtest"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/internal/store/storetest"
	"github.com/kin-agents/kin/kin"
)

// wireCounter counts a connection's round trips to the server as the wire
// sees them: each time the client, having written, reads an answer. The
// database/sql driver's liveness ping (a simple query "-- ping", sent
// before a connection idle for a second is reused) is counted apart.
type wireCounter struct {
	mu           sync.Mutex
	wrote, ping  bool
	trips, pings int64
}

type countedConn struct {
	net.Conn
	w *wireCounter
}

func (c countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.w.mu.Lock()
		c.w.wrote = true
		c.w.ping = c.w.ping || bytes.Contains(b[:n], []byte("-- ping"))
		c.w.mu.Unlock()
	}
	return n, err
}

func (c countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.w.mu.Lock()
		if c.w.wrote {
			if c.w.ping {
				c.w.pings++
			} else {
				c.w.trips++
			}
			c.w.wrote, c.w.ping = false, false
		}
		c.w.mu.Unlock()
	}
	return n, err
}

func (w *wireCounter) read() (trips, pings int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.trips, w.pings
}

// TestRoundTripsPerBatch: the writer's round trips to the server for one
// Update alone in its batch, counted on the wire (and by the driver's own
// counter, which the benchmarks report): the BEGIN and the write lock go
// with the log's size read, the events and any held write with the
// COMMIT, and in a deferrable Update SpendAdd's write with the next
// read. The model gateway's metering (SpendAdd, a model.call event, the
// chain's sums read back), lazy and deferrable as the authority runs it,
// takes 3 (4 through UpdateLazy: SpendAdd is one statement, was two); a
// registration 3 (4 through Update).
func TestRoundTripsPerBatch(t *testing.T) {
	ctx := context.Background()
	wire := &wireCounter{}
	s, err := Open(ctx, pgtest.NewDatabase(t), Options{wrapWriter: func(c net.Conn) net.Conn { return countedConn{c, wire} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	parent := storetest.Insert(t, s, "parent", 0)
	child := storetest.Insert(t, s, "child", parent.ID)
	event := func(tx store.Tx, typ string, id, parent kin.AgentID) error {
		return store.AppendEvent(ctx, tx, time.Now(), typ, id, parent, map[string]any{"agent": id})
	}
	meter := func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, child.ID, 10, 0.5); err != nil {
			return err
		}
		if err := event(tx, kin.EventModelCall, child.ID, parent.ID); err != nil {
			return err
		}
		chain, err := tx.PermChain(ctx, child.ID)
		if err == nil && (len(chain) != 2 || chain[0].Spend.Tokens == 0 || chain[1].Spend.SubTokens != chain[0].Spend.Tokens) {
			err = fmt.Errorf("the chain's sums read back %+v: the spend just added is not in them", chain)
		}
		return err
	}
	n := 0
	register := func(tx store.Tx) error {
		if _, err := tx.AgentGetByID(ctx, parent.ID); err != nil {
			return err
		}
		a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: storetest.NewAgent(fmt.Sprintf("r%d", n), parent.ID, 1)})
		if err != nil {
			return err
		}
		return event(tx, kin.EventAgentRegistered, a.ID, parent.ID)
	}
	for _, c := range []struct {
		name string
		run  func() error
		want int64
	}{
		{"metering, lazy and deferrable", func() error { return s.UpdateLazyDeferrable(ctx, meter) }, 3},
		{"metering, lazy", func() error { return s.UpdateLazy(ctx, meter) }, 4},
		{"an event alone", func() error {
			return s.Update(ctx, func(tx store.Tx) error { return event(tx, kin.EventAgentMessage, child.ID, parent.ID) })
		}, 2},
		{"a registration, deferrable", func() error { n++; return s.UpdateDeferrable(ctx, register) }, 3},
		{"a registration", func() error { n++; return s.Update(ctx, register) }, 4},
		{"nothing written", func() error { return s.Update(ctx, func(store.Tx) error { return nil }) }, 2},
	} {
		// The first run prepares the statements pgx has not seen.
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		counted := s.WriterRoundTrips()
		wired, pings := wire.read()
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		gotWire, gotPings := wire.read()
		if got := s.WriterRoundTrips() - counted; got != c.want || gotWire-wired != c.want {
			t.Errorf("%s: %d round trips counted by the driver, %d on the wire (and %d liveness pings); want %d",
				c.name, got, gotWire-wired, gotPings-pings, c.want)
		}
	}
	// What was metered is there: 2 metering Updates of each kind.
	chain, err := s.PermChain(ctx, child.ID)
	if err != nil || len(chain) != 2 || chain[0].Spend.Tokens != 40 || chain[1].Spend.SubTokens != 40 {
		t.Fatalf("after 4 meterings of 10 tokens: %+v, %v", chain, err)
	}
}
