package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
)

// testHostLeases: a host's name is held by a home's lease. Another home
// is refused it while the lease runs and may take it once it ended; the
// same home takes it back at once (a restart); a renewal by a home that
// lost the name is ErrNotFound; a release ends the lease at once; the
// list counts each host's live agents.
func testHostLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	claim := func(name, home string, now time.Time) error {
		return s.Update(ctx, func(tx store.Tx) error {
			return tx.HostClaim(ctx, store.HostRow{Name: name, Home: home, Address: "10.0.0.1:7777", Containment: "cgroup2",
				Version: "test", StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(15 * time.Second)})
		})
	}
	if err := claim("a", "home-1", at(0)); err != nil {
		t.Fatal(err)
	}
	if err := claim("a", "home-2", at(10*time.Second)); !errors.Is(err, store.ErrHostTaken) {
		t.Fatalf("another home claims a running lease: %v, want ErrHostTaken", err)
	}
	if err := claim("a", "home-1", at(11*time.Second)); err != nil {
		t.Fatalf("the same home claims its name again: %v", err)
	}
	if err := claim("b", "home-2", at(11*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Renewals move the lease; past its end another home may take it.
	renew := func(name, home string, now time.Time) error {
		return s.Update(ctx, func(tx store.Tx) error { return tx.HostRenew(ctx, name, home, now, now.Add(15*time.Second)) })
	}
	if err := renew("a", "home-1", at(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := claim("a", "home-2", at(34*time.Second)); !errors.Is(err, store.ErrHostTaken) {
		t.Fatalf("another home claims a renewed lease: %v, want ErrHostTaken", err)
	}
	if err := claim("a", "home-2", at(36*time.Second)); err != nil {
		t.Fatalf("another home claims an expired lease: %v", err)
	}
	if err := renew("a", "home-1", at(37*time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the old home renews a name it lost: %v, want ErrNotFound", err)
	}
	// A release frees the name at once.
	if err := s.Update(ctx, func(tx store.Tx) error { return tx.HostRelease(ctx, "b", "home-2") }); err != nil {
		t.Fatal(err)
	}
	if err := claim("b", "home-3", at(12*time.Second)); err != nil {
		t.Fatalf("another home claims a released name: %v", err)
	}
	// Agents count for the host they name, while live.
	for i, host := range []string{"a", "a", "b", ""} {
		ag := NewAgent("on-"+string(rune('w'+i)), 0, 0)
		ag.Host = host
		update(t, s, func(tx store.Tx) error {
			_, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: ag})
			return err
		})
	}
	got, err := s.AgentLiveByName(ctx, "on-w")
	if err != nil || got.Host != "a" {
		t.Fatalf("the agent's host: %+v, %v", got, err)
	}
	// Each host's names: its own agents' and those recorded with none.
	for host, want := range map[string]string{"a": "on-w on-x on-z", "b": "on-y on-z", "": "on-w on-x on-y on-z", "c": "on-z"} {
		names, err := s.AgentNamesOfHost(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range names {
			if a, err := s.AgentGetByID(ctx, n.ID); err != nil || a.Name != n.Name {
				t.Errorf("host %q: name %s names agent %d (%v)", host, n.Name, n.ID, err)
			}
			got = append(got, n.Name)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("the names of host %q: %q, want %q", host, strings.Join(got, " "), want)
		}
	}
	hosts, err := s.HostList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 || hosts[0].Name != "a" || hosts[1].Name != "b" {
		t.Fatalf("hosts: %+v", hosts)
	}
	a, b := hosts[0], hosts[1]
	if a.Home != "home-2" || a.Agents != 2 || !a.LeaseUntil.Equal(at(51*time.Second)) || a.Address != "10.0.0.1:7777" || a.Containment != "cgroup2" {
		t.Errorf("host a: %+v", a)
	}
	if b.Home != "home-3" || b.Agents != 1 || !b.StartedAt.Equal(at(12*time.Second)) {
		t.Errorf("host b: %+v", b)
	}
}

// testSingletonLeases: a lease is taken when free, renewed by its holder,
// refused to another while it runs, taken by another once it expired, and
// free at once when released.
func testSingletonLeases(t *testing.T, s store.Store) {
	ctx := context.Background()
	take := func(holder string, at time.Duration) bool {
		t.Helper()
		var held bool
		update(t, s, func(tx store.Tx) error {
			var err error
			held, err = tx.LeaseTake(ctx, "log-signer", holder, t0.Add(at), t0.Add(at+10*time.Second))
			return err
		})
		return held
	}
	switch {
	case !take("a", 0):
		t.Fatal("a free lease was not taken")
	case !take("a", 5*time.Second):
		t.Fatal("the holder could not renew")
	case take("b", 14*time.Second):
		t.Fatal("another took a running lease")
	case !take("b", 16*time.Second):
		t.Fatal("another could not take an expired lease")
	case take("a", 17*time.Second):
		t.Fatal("the old holder took it back while the new one holds it")
	}
	update(t, s, func(tx store.Tx) error { return tx.LeaseRelease(ctx, "log-signer", "b") })
	if !take("a", 18*time.Second) {
		t.Fatal("a released lease was not free")
	}
}

// testSigningKeys: each host publishes its own keys; publishing again
// changes nothing, a rotation retires the old key and adds the new one, a
// key its host dropped is removed, and another host's keys are untouched.
func testSigningKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	publish := func(host string, keys ...store.SigningKeyRow) bool {
		t.Helper()
		var changed bool
		update(t, s, func(tx store.Tx) error {
			var err error
			changed, err = tx.SigningKeyPublish(ctx, host, "agent-provider", keys)
			return err
		})
		return changed
	}
	key := func(kid string, retired time.Duration) store.SigningKeyRow {
		k := store.SigningKeyRow{KID: kid, PublicKey: []byte("pub-" + kid), CreatedAt: t0}
		if retired > 0 {
			k.RetiredAt = t0.Add(retired)
		}
		return k
	}
	list := func() string {
		t.Helper()
		rows, err := s.SigningKeyList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%s/%s/%s/%s/%v", r.Host, r.Role, r.KID, r.PublicKey, !r.RetiredAt.IsZero()))
		}
		return strings.Join(out, " ")
	}
	if !publish("a", key("ap-1", 0)) || !publish("b", key("ap-b1", 0)) {
		t.Fatal("a first publication changed nothing")
	}
	if publish("a", key("ap-1", 0)) {
		t.Error("publishing the same keys again changed something")
	}
	if !publish("a", key("ap-1", time.Hour), key("ap-2", 0)) {
		t.Fatal("a rotation changed nothing")
	}
	if got, want := list(), "a/agent-provider/ap-1/pub-ap-1/true a/agent-provider/ap-2/pub-ap-2/false b/agent-provider/ap-b1/pub-ap-b1/false"; got != want {
		t.Fatalf("after a's rotation:\n got %s\nwant %s", got, want)
	}
	if !publish("a", key("ap-2", 0)) {
		t.Fatal("removing a key changed nothing")
	}
	if got, want := list(), "a/agent-provider/ap-2/pub-ap-2/false b/agent-provider/ap-b1/pub-ap-b1/false"; got != want {
		t.Fatalf("after a dropped its old key:\n got %s\nwant %s", got, want)
	}
	var other bool
	update(t, s, func(tx store.Tx) error {
		var err error
		other, err = tx.SigningKeyPublish(ctx, "a", "person-server", []store.SigningKeyRow{key("ps-1", 0)})
		return err
	})
	if !other || !strings.HasPrefix(list(), "a/agent-provider/ap-2") || !strings.Contains(list(), "a/person-server/ps-1") {
		t.Fatalf("another role's key: %s", list())
	}
}
