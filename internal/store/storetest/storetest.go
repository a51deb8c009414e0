// Package storetest is the one test suite every store driver passes:
// Exercise(t, open) runs it against a driver's fresh stores.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Opener opens a new, empty store for t and returns it with a function
// that opens another handle on the same store, as another process would
// (its own connections, writer and caches). The opener closes what it
// opened when t ends; the suite may close a handle earlier (Close is safe
// to call twice).
type Opener func(t *testing.T) (s store.Store, second func() store.Store)

var t0 = time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)

// Exercise runs the whole suite.
func Exercise(t *testing.T, open Opener) {
	exercise(t, open, true)
}

// ExerciseOneHandle runs the suite's tests of one handle: for a store that
// must be its database's only handle (open's second is not called).
func ExerciseOneHandle(t *testing.T, open Opener) {
	exercise(t, open, false)
}

func exercise(t *testing.T, open Opener, twoHandles bool) {
	one := func(t *testing.T) store.Store {
		s, _ := open(t)
		return s
	}
	t.Run("AgentInsertAndGet", func(t *testing.T) { testAgentInsertAndGet(t, one(t)) })
	t.Run("AgentList", func(t *testing.T) { testAgentList(t, one(t)) })
	t.Run("AgentListMany", func(t *testing.T) { testAgentListMany(t, one(t)) })
	t.Run("AncestorsAndSubtree", func(t *testing.T) { testAncestorsAndSubtree(t, one(t)) })
	t.Run("NameUniqueAmongNonTerminated", func(t *testing.T) { testNameUnique(t, one(t)) })
	t.Run("WalletUnique", func(t *testing.T) { testWalletUnique(t, one(t)) })
	t.Run("CountLive", func(t *testing.T) { testCountLive(t, one(t)) })
	t.Run("CountsForMetrics", func(t *testing.T) { testCountsForMetrics(t, one(t)) })
	t.Run("Events", func(t *testing.T) { testEvents(t, one(t)) })
	t.Run("SettingsAndRejections", func(t *testing.T) { testSettingsAndRejections(t, one(t)) })
	t.Run("FailedUpdateUndoesOnlyItself", func(t *testing.T) { testFailedUpdate(t, one(t)) })
	t.Run("FailedUpdateAloneUndoesItself", func(t *testing.T) { testFailedUpdateAlone(t, one(t)) })
	t.Run("UpdatesAreSerialised", func(t *testing.T) { testSerialised(t, one(t)) })
	t.Run("RuntimeFieldsAndProcessSpec", func(t *testing.T) { testRuntime(t, one(t)) })
	t.Run("UpdateMany", func(t *testing.T) { testUpdateMany(t, one(t)) })
	t.Run("PolicyAndSpend", func(t *testing.T) { testPolicyAndSpend(t, one(t)) })
	t.Run("BudgetCounters", func(t *testing.T) { testBudgetCounters(t, one(t)) })
	t.Run("EscalatedChain", func(t *testing.T) { testEscalatedChain(t, one(t)) })
	t.Run("Identity", func(t *testing.T) { testIdentity(t, one(t)) })
	t.Run("DeferredNameClashes", func(t *testing.T) { testDeferredNameClashes(t, one(t)) })
	t.Run("DeferredMixed", func(t *testing.T) { testDeferredMixed(t, one(t)) })
	t.Run("CloseTwiceAndUpdateAfterClose", func(t *testing.T) { testClose(t, one(t)) })
	t.Run("LogAppend", func(t *testing.T) { testLogAppend(t, one(t)) })
	t.Run("LogProofs", func(t *testing.T) { testLogProofs(t, one(t)) })
	t.Run("LogRefusesDataWithNewlines", func(t *testing.T) { testLogRefusesDataWithNewlines(t, one(t)) })
	t.Run("NotifyOwnCommits", func(t *testing.T) { testNotifyOwnCommits(t, one(t)) })
	t.Run("SubscribeSleepsThroughOtherTypes", func(t *testing.T) { testSubscribeSleepsThroughOtherTypes(t, one(t)) })
	t.Run("HostLeases", func(t *testing.T) { testHostLeases(t, one(t)) })
	t.Run("SingletonLeases", func(t *testing.T) { testSingletonLeases(t, one(t)) })
	t.Run("SigningKeys", func(t *testing.T) { testSigningKeys(t, one(t)) })
	if !twoHandles {
		return
	}
	two := func(t *testing.T, test func(*testing.T, store.Store, func() store.Store)) {
		s, second := open(t)
		test(t, s, second)
	}
	t.Run("LogSurvivesReopen", func(t *testing.T) { two(t, testLogSurvivesReopen) })
	t.Run("NotifyOtherHandle", func(t *testing.T) { two(t, testNotifyOtherHandle) })
	t.Run("FollowAcrossHandles", func(t *testing.T) { two(t, testFollowAcrossHandles) })
	t.Run("TwoHandlesHoldALimit", func(t *testing.T) { two(t, testTwoHandlesHoldALimit) })
	t.Run("TwoHandlesHoldACardinality", func(t *testing.T) { two(t, testTwoHandlesHoldACardinality) })
	t.Run("TwoHandlesHoldASpawnBudget", func(t *testing.T) { two(t, testTwoHandlesHoldASpawnBudget) })
	t.Run("TwoHandlesHoldASpendCap", func(t *testing.T) { two(t, testTwoHandlesHoldASpendCap) })
	t.Run("TwoHandlesDeferredNames", func(t *testing.T) { two(t, testTwoHandlesDeferredNames) })
	t.Run("TwoHandlesDeferredChains", func(t *testing.T) { two(t, testTwoHandlesDeferredChains) })
	t.Run("TwoHandlesAppendOneLog", func(t *testing.T) { two(t, testTwoHandlesAppendOneLog) })
	t.Run("AppendedHere", func(t *testing.T) { two(t, testAppendedHere) })
}

// Insert stores an agent called name under parent in its own Update.
func Insert(t *testing.T, s store.Store, name string, parent kin.AgentID) *kin.Agent {
	t.Helper()
	var out *kin.Agent
	err := s.Update(context.Background(), func(tx store.Tx) error {
		gen := 0
		if parent != 0 {
			p, err := tx.AgentGetByID(context.Background(), parent)
			if err != nil {
				return err
			}
			gen = p.Generation + 1
		}
		var err error
		out, err = tx.AgentInsert(context.Background(), store.AgentInsertParams{Agent: NewAgent(name, parent, gen)})
		return err
	})
	if err != nil {
		t.Fatalf("insert %s: %v", name, err)
	}
	return out
}

// NewAgent is a registered, active agent row.
func NewAgent(name string, parent kin.AgentID, gen int) kin.Agent {
	return kin.Agent{
		Name: name, Parent: parent, Generation: gen, Responsible: "Dr. Schmidt",
		Life: kin.LifeOwned, Status: kin.StatusActive, State: kin.StateRegistered,
		CreatedAt: t0, CreatedBy: kin.Operator, UpdatedAt: t0,
	}
}

func update(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.Update(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func testAgentInsertAndGet(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := NewAgent("coordinator", 0, 0)
	a.Role, a.Wallet, a.ConstitutionHash, a.CapabilityHash, a.Scope, a.SelfModifying = "Research Coordinator", "0x4b19Ccf2", "sha256:c", "sha256:k", "research", true
	// Text that looks like a driver's separators, and text beyond ASCII, must
	// come back byte for byte.
	a.Responsible = "Dr. Schmidt, COAI Research: 12,3:ä\x1f∑"
	a.Scope = "line one\nline two,\t3:abc"
	var got *kin.Agent
	update(t, s, func(tx store.Tx) error {
		var err error
		got, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
		return err
	})
	if got.ID != 1 {
		t.Fatalf("first id = %d, want 1", got.ID)
	}
	back, err := s.AgentGetByID(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	a.ID = 1
	if fmt.Sprintf("%+v", *back) != fmt.Sprintf("%+v", a) {
		t.Fatalf("stored  %+v\nwant    %+v", *back, a)
	}
	if second := Insert(t, s, "collector", 1); second.ID != 2 {
		t.Fatalf("second id = %d", second.ID)
	}
	if _, err := s.AgentGetByID(ctx, 99); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing agent: %v", err)
	}
	if n, err := s.AgentCount(ctx); err != nil || n != 2 {
		t.Fatalf("count = %d, %v", n, err)
	}
}

func testAgentList(t *testing.T, s store.Store) {
	ctx := context.Background()
	r := Insert(t, s, "r", 0)
	Insert(t, s, "c1", r.ID)
	c2 := Insert(t, s, "c2", r.ID)
	update(t, s, func(tx store.Tx) error {
		return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: c2.ID, Status: kin.StatusSuspended, At: t0})
	})
	check := func(f kin.AgentFilter, want ...string) {
		t.Helper()
		got, err := s.AgentList(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range got {
			names = append(names, a.Name)
		}
		if fmt.Sprint(names) != fmt.Sprint(want) {
			t.Errorf("AgentList(%+v) = %v, want %v", f, names, want)
		}
	}
	check(kin.AgentFilter{}, "r", "c1", "c2")
	check(kin.AgentFilter{HasParent: true}, "r")
	check(kin.AgentFilter{Parent: r.ID, HasParent: true}, "c1", "c2")
	check(kin.AgentFilter{Status: kin.StatusSuspended}, "c2")
	check(kin.AgentFilter{State: kin.StateRegistered, Limit: 2}, "r", "c1")
	check(kin.AgentFilter{Responsible: "nobody"})
	check(kin.AgentFilter{Name: "c1"}, "c1")
}

// testAgentListMany: an unfiltered list of more agents than a driver
// reads in one statement (sqlstore reads ranges of ids in parallel) holds
// every agent once, in id order; a filtered one and a limited one are
// unchanged.
func testAgentListMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 5000
	update(t, s, func(tx store.Tx) error {
		for i := range n {
			parent := kin.AgentID(0)
			if i > 0 {
				parent = kin.AgentID(1 + (i-1)/10) // ten children each
			}
			if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("m%d", i), parent, 0)}); err != nil {
				return err
			}
		}
		return nil
	})
	all, err := s.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("AgentList of %d agents: %d rows", n, len(all))
	}
	for i, a := range all {
		if a.ID != kin.AgentID(i+1) || a.Name != fmt.Sprintf("m%d", i) {
			t.Fatalf("row %d: agent %d %q; want %d m%d (every agent once, by id)", i, a.ID, a.Name, i+1, i)
		}
	}
	if got, err := s.AgentList(ctx, kin.AgentFilter{Limit: 3}); err != nil || len(got) != 3 || got[2].ID != 3 {
		t.Errorf("AgentList limit 3: %d rows, %v", len(got), err)
	}
	if got, err := s.AgentList(ctx, kin.AgentFilter{Parent: 1, HasParent: true}); err != nil || len(got) != 10 {
		t.Errorf("AgentList of agent 1's children: %d rows, %v", len(got), err)
	}
	// The children of several agents in one read, by id; a parent without
	// children or unknown adds none.
	got, err := s.AgentListByParents(ctx, []kin.AgentID{30, 2, n + 1, 3, 2})
	if err != nil {
		t.Fatal(err)
	}
	var want []kin.AgentID
	for _, p := range []kin.AgentID{2, 3, 30} {
		for k := range kin.AgentID(10) {
			want = append(want, 10*(p-1)+2+k)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("AgentListByParents(30, 2, %d, 3, 2): %d rows, want %d", n+1, len(got), len(want))
	}
	for i, a := range got {
		if a.ID != want[i] || a.Parent != kin.AgentID(1+(int(a.ID)-2)/10) {
			t.Fatalf("AgentListByParents row %d: agent %d (parent %d), want %d", i, a.ID, a.Parent, want[i])
		}
	}
	if got, err := s.AgentListByParents(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("AgentListByParents of none: %d rows, %v", len(got), err)
	}
	testAgentRows(t, s, n)
}

// testAgentRows: AgentRowsByIDs hands on the rows of the ids that exist,
// each once, in ascending id order (a list large enough to be read in
// parallel chunks too), each row AgentRowFields' fields; an error from
// emit stops it and is returned.
func testAgentRows(t *testing.T, s store.Store, n int) {
	ctx := context.Background()
	fields := s.AgentRowFields()
	if len(fields) < 3 || fields[0] != "id" || fields[1] != "name" {
		t.Fatalf("AgentRowFields = %v, want id and name first", fields)
	}
	rowsOf := func(ids []kin.AgentID) []string {
		t.Helper()
		var rows []string
		err := s.AgentRowsByIDs(ctx, ids, func(b []byte) error {
			for len(b) > 0 {
				i := strings.IndexByte(string(b), ':')
				size, err := strconv.Atoi(string(b[:i]))
				if i < 0 || err != nil || i+1+size > len(b) {
					t.Fatalf("malformed record at %q", b)
				}
				rows = append(rows, string(b[i+1:i+1+size]))
				b = b[i+1+size:]
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	// The row starts "<id>,<len>:<name>".
	head := func(row string) string {
		id, rest, _ := strings.Cut(row, ",")
		size, name, _ := strings.Cut(rest, ":")
		k, _ := strconv.Atoi(size)
		return id + " " + name[:min(k, len(name))]
	}
	got := rowsOf([]kin.AgentID{30, 2, kin.AgentID(n + 7), 3, 2})
	if len(got) != 3 || head(got[0]) != "2 m1" || head(got[1]) != "3 m2" || head(got[2]) != "30 m29" {
		t.Fatalf("AgentRowsByIDs(30, 2, unknown, 3, 2): %q", got)
	}
	var all []kin.AgentID
	for id := kin.AgentID(n); id >= 1; id-- { // in no particular order
		all = append(all, id)
	}
	rows := rowsOf(all)
	if len(rows) != n {
		t.Fatalf("AgentRowsByIDs of %d agents: %d rows", n, len(rows))
	}
	for i, row := range rows {
		if want := fmt.Sprintf("%d m%d", i+1, i); head(row) != want {
			t.Fatalf("row %d begins %q, want %q (every agent once, by id)", i, head(row), want)
		}
	}
	stop := errors.New("enough")
	calls := 0
	if err := s.AgentRowsByIDs(ctx, all, func([]byte) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("emit's error: got %v after %d calls, want it after 1", err, calls)
	}
	if err := s.AgentRowsByIDs(ctx, nil, func([]byte) error { t.Fatal("rows of no ids"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func testAncestorsAndSubtree(t *testing.T, s store.Store) {
	ctx := context.Background()
	// seed 000's example tree
	root := Insert(t, s, "coordinator", 0)
	collector := Insert(t, s, "collector", root.ID)
	writer := Insert(t, s, "writer", root.ID)
	Insert(t, s, "reviewer", root.ID)
	scraper := Insert(t, s, "scraper", collector.ID)
	Insert(t, s, "fetcher", collector.ID)
	latex := Insert(t, s, "latex", writer.ID)
	other := Insert(t, s, "other-root", 0)

	anc, err := s.AgentAncestors(ctx, latex.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(anc); got != "[latex writer coordinator]" {
		t.Fatalf("ancestors = %s", got)
	}
	if anc, _ := s.AgentAncestors(ctx, root.ID); names(anc) != "[coordinator]" {
		t.Fatalf("root ancestors = %s", names(anc))
	}
	if _, err := s.AgentAncestors(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	sub, err := s.AgentSubtree(ctx, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sub); got != "[coordinator collector writer reviewer scraper fetcher latex]" {
		t.Fatalf("subtree = %s", got)
	}
	if sub, _ := s.AgentSubtree(ctx, scraper.ID); names(sub) != "[scraper]" {
		t.Fatalf("leaf subtree = %s", names(sub))
	}
	if sub, _ := s.AgentSubtree(ctx, other.ID); names(sub) != "[other-root]" {
		t.Fatalf("other subtree = %s", names(sub))
	}
	if _, err := s.AgentSubtree(ctx, 999); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	links, err := s.AgentLinks(ctx)
	if err != nil || fmt.Sprint(links) != "[{1 0} {2 1} {3 1} {4 1} {5 2} {6 2} {7 3} {8 0}]" {
		t.Fatalf("links = %v, %v", links, err)
	}
	byID, err := s.AgentListByIDs(ctx, []kin.AgentID{latex.ID, 999, root.ID, scraper.ID})
	if err != nil || names(byID) != "[latex coordinator scraper]" {
		t.Fatalf("by ids = %s, %v", names(byID), err)
	}
	if none, err := s.AgentListByIDs(ctx, nil); err != nil || len(none) != 0 {
		t.Fatalf("no ids = %v, %v", none, err)
	}
}

func names(as []*kin.Agent) string {
	var n []string
	for _, a := range as {
		n = append(n, a.Name)
	}
	return fmt.Sprint(n)
}

func testNameUnique(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Insert(t, s, "coder", 0)
	err := s.Update(ctx, func(tx store.Tx) error {
		_, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent("coder", 0, 0)})
		return err
	})
	if !errors.Is(err, store.ErrNameTaken) {
		t.Fatalf("duplicate live name: %v", err)
	}
	if got, err := txLiveByName(s, "coder"); err != nil || got.ID != a.ID {
		t.Fatalf("live by name: %v %v", got, err)
	}
	update(t, s, func(tx store.Tx) error {
		return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: a.ID, Status: kin.StatusTerminated, State: kin.StateTerminated, At: t0})
	})
	if _, err := txLiveByName(s, "coder"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("terminated still live by name: %v", err)
	}
	b := Insert(t, s, "coder", 0) // the name is free again
	if b.ID == a.ID {
		t.Fatal("reused id")
	}
}

func txLiveByName(s store.Store, name string) (*kin.Agent, error) {
	var a *kin.Agent
	err := s.Update(context.Background(), func(tx store.Tx) error {
		var err error
		a, err = tx.AgentLiveByName(context.Background(), name)
		return err
	})
	return a, err
}

func testWalletUnique(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := NewAgent("a", 0, 0)
	a.Wallet = "0xabc"
	update(t, s, func(tx store.Tx) error {
		_, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
		return err
	})
	b := NewAgent("b", 0, 0)
	b.Wallet = "0xabc"
	err := s.Update(ctx, func(tx store.Tx) error {
		exists, err := tx.AgentWalletExists(ctx, "0xabc")
		if err != nil || !exists {
			return fmt.Errorf("wallet exists = %v, %v", exists, err)
		}
		_, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: b})
		return err
	})
	if !errors.Is(err, store.ErrWalletTaken) {
		t.Fatalf("duplicate wallet: %v", err)
	}
	// Agents without a wallet never clash.
	Insert(t, s, "c", 0)
	Insert(t, s, "d", 0)
}

func testCountLive(t *testing.T, s store.Store) {
	ctx := context.Background()
	r := Insert(t, s, "GO", 0)
	var ids []kin.AgentID
	for _, n := range []string{"HO@a", "HO@b", "PO-x"} {
		role, context := "HO", ""
		if n[0] == 'P' {
			role = "PO"
		}
		nm, _ := kin.ParseName(n)
		context = nm.Context
		a := NewAgent(n, r.ID, 1)
		a.Role = role
		a.Host = "h1" // HO@a and PO-x on h1, HO@b on h2
		if n == "HO@b" {
			a.Host = "h2"
		}
		update(t, s, func(tx store.Tx) error {
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, NameContext: context})
			if err == nil {
				ids = append(ids, got.ID)
			}
			return err
		})
	}
	count := func(p store.AgentCountLiveParams) int {
		var n int
		update(t, s, func(tx store.Tx) error {
			var err error
			n, err = tx.AgentCountLive(ctx, p)
			return err
		})
		return n
	}
	a := "a"
	if n := count(store.AgentCountLiveParams{Parent: r.ID, HasParent: true}); n != 3 {
		t.Errorf("live children = %d", n)
	}
	if n := count(store.AgentCountLiveParams{Role: "HO"}); n != 2 {
		t.Errorf("live HO = %d", n)
	}
	if n := count(store.AgentCountLiveParams{Role: "HO", NameContext: &a}); n != 1 {
		t.Errorf("live HO@a = %d", n)
	}
	for host, want := range map[string]int{"h1": 1, "h2": 1, "h3": 0} {
		if n := count(store.AgentCountLiveParams{Role: "HO", Host: &host}); n != want {
			t.Errorf("live HO on host %s = %d, want %d", host, n, want)
		}
	}
	// Offline agents are live but not accountable (a cardinality slot is
	// an accountable agent's); Except leaves one out.
	update(t, s, func(tx store.Tx) error {
		return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: ids[1], Status: kin.StatusActive, State: kin.StateOffline, At: t0})
	})
	if n := count(store.AgentCountLiveParams{Role: "HO"}); n != 2 {
		t.Errorf("live HO with HO@b offline = %d, want 2", n)
	}
	if n := count(store.AgentCountLiveParams{Role: "HO", Accountable: true}); n != 1 {
		t.Errorf("accountable HO with HO@b offline = %d, want 1", n)
	}
	if n := count(store.AgentCountLiveParams{Role: "HO", Accountable: true, Except: ids[0]}); n != 0 {
		t.Errorf("accountable HO but HO@a = %d, want 0", n)
	}
	if n := count(store.AgentCountLiveParams{Role: "HO", Except: ids[0]}); n != 1 {
		t.Errorf("live HO but HO@a = %d, want 1", n)
	}
	// Suspended agents are live; revoked, terminated and ended ones are not.
	update(t, s, func(tx store.Tx) error {
		if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: ids[0], Status: kin.StatusSuspended, At: t0}); err != nil {
			return err
		}
		if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: ids[1], Status: kin.StatusRevoked, At: t0}); err != nil {
			return err
		}
		return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: ids[2], Status: kin.StatusActive, State: kin.StateCancelled, At: t0})
	})
	if n := count(store.AgentCountLiveParams{Parent: r.ID, HasParent: true}); n != 1 {
		t.Errorf("live children after changes = %d, want 1 (the suspended one)", n)
	}
	got, _ := s.AgentGetByID(ctx, ids[2])
	if got.State != kin.StateCancelled || got.Status != kin.StatusActive {
		t.Errorf("state update: %+v", got)
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: 999, Status: kin.StatusRevoked, At: t0})
	}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("update missing: %v", err)
	}
}

// testCountsForMetrics: the aggregates a metrics scrape reads.
func testCountsForMetrics(t *testing.T, s store.Store) {
	ctx := context.Background()
	counts := func() map[string]int {
		t.Helper()
		m := map[string]int{}
		err := s.AgentCountByStateRole(ctx, func(state, role string, n int) {
			k := state + "/" + role
			if _, dup := m[k]; dup {
				t.Errorf("AgentCountByStateRole called fn twice for %s", k)
			}
			m[k] = n
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := counts(); len(m) != 0 {
		t.Fatalf("counts of an empty store = %v", m)
	}
	if _, ok, err := s.OldestHeartbeat(ctx); ok || err != nil {
		t.Fatalf("OldestHeartbeat of an empty store = %v, %v", ok, err)
	}
	type row struct {
		role   string
		state  kin.State
		status kin.Status
		beat   time.Time
	}
	h := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	rows := []row{
		{"HO", kin.StateActive, kin.StatusActive, h(5)},
		{"HO", kin.StateActive, kin.StatusActive, h(3)},
		{"HO", kin.StateStale, kin.StatusActive, h(2)},   // stale: followed, the oldest
		{"HO", kin.StateOffline, kin.StatusActive, h(1)}, // offline: no longer followed
		{"PO", kin.StateActive, kin.StatusSuspended, h(0)},
		{"", kin.StateRegistered, kin.StatusActive, time.Time{}},
		{"", kin.StateTerminated, kin.StatusTerminated, time.Time{}},
	}
	for i, r := range rows {
		a := NewAgent(fmt.Sprintf("m%d", i), 0, 0)
		a.Role = r.role
		update(t, s, func(tx store.Tx) error {
			got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
			if err != nil {
				return err
			}
			p := store.AgentUpdateParams{ID: got.ID, At: t0, State: &r.state, Status: &r.status}
			if !r.beat.IsZero() {
				p.LastHeartbeat = &r.beat
			}
			return tx.AgentUpdate(ctx, p)
		})
	}
	want := map[string]int{"active/HO": 2, "stale/HO": 1, "offline/HO": 1, "active/PO": 1, "registered/": 1, "terminated/": 1}
	if m := counts(); fmt.Sprint(m) != fmt.Sprint(want) {
		t.Fatalf("AgentCountByStateRole = %v, want %v", m, want)
	}
	if oldest, ok, err := s.OldestHeartbeat(ctx); err != nil || !ok || !oldest.Equal(h(2)) {
		t.Fatalf("OldestHeartbeat = %v, %v, %v; want %v (the stale agent's)", oldest, ok, err, h(2))
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	if last, err := s.EventLastSeq(ctx); err != nil || last != 0 {
		t.Fatalf("empty last seq = %d, %v", last, err)
	}
	var appended []kin.Event
	update(t, s, func(tx store.Tx) error {
		for i, ev := range []struct {
			typ           string
			agent, parent kin.AgentID
		}{
			{kin.EventAgentRegistered, 1, 0},
			{kin.EventAgentRegistered, 2, 1},
			{kin.EventChildSpawned, 2, 1},
			{kin.EventSpawnRejected, 0, 2},
			{kin.EventGovernorChanged, 0, 0},
		} {
			e, err := kin.NewEvent(ev.typ, ev.agent, ev.parent, map[string]any{"i": i})
			if err != nil {
				return err
			}
			e.Time = t0.Add(time.Duration(i) * time.Second)
			e, err = tx.EventAppend(ctx, e)
			if err != nil {
				return err
			}
			appended = append(appended, e)
		}
		return nil
	})
	for i, e := range appended {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d seq = %d", i, e.Seq)
		}
	}
	seqs := func(f kin.EventFilter) string {
		t.Helper()
		evs, err := s.EventList(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return fmt.Sprint(out)
	}
	for _, tt := range []struct {
		f    kin.EventFilter
		want string
	}{
		{kin.EventFilter{}, "[1 2 3 4 5]"},
		{kin.EventFilter{Since: 3}, "[4 5]"},
		{kin.EventFilter{Agent: 1}, "[1 2 3]"},
		{kin.EventFilter{Agent: 2}, "[2 3 4]"},
		{kin.EventFilter{Agent: 2, Subject: true}, "[2 3]"},
		{kin.EventFilter{Agent: 1, Subject: true}, "[1]"},
		{kin.EventFilter{Agent: 2, Subject: true, Before: 10, Limit: 1}, "[3]"},
		{kin.EventFilter{Types: []string{kin.EventChildSpawned, kin.EventGovernorChanged}}, "[3 5]"},
		{kin.EventFilter{Limit: 2, Since: 1}, "[2 3]"},
		{kin.EventFilter{Before: 5}, "[1 2 3 4]"},
		{kin.EventFilter{Before: 5, Limit: 2}, "[3 4]"},
		{kin.EventFilter{Before: 5, Since: 1, Limit: 10}, "[2 3 4]"},
		{kin.EventFilter{Before: 4, Agent: 2, Limit: 1}, "[3]"},
	} {
		if got := seqs(tt.f); got != tt.want {
			t.Errorf("EventList(%+v) = %s, want %s", tt.f, got, tt.want)
		}
	}
	evs, _ := s.EventList(ctx, kin.EventFilter{Since: 1, Limit: 1})
	if e := evs[0]; e.Type != kin.EventAgentRegistered || e.Agent != 2 || e.Parent != 1 || !e.Time.Equal(t0.Add(time.Second)) || string(e.Data) != `{"i":1}` {
		t.Errorf("stored event = %+v (data %s)", e, e.Data)
	}
	if last, _ := s.EventLastSeq(ctx); last != 5 {
		t.Errorf("last seq = %d", last)
	}
}

func testSettingsAndRejections(t *testing.T, s store.Store) {
	ctx := context.Background()
	r := Insert(t, s, "r", 0)
	update(t, s, func(tx store.Tx) error {
		if err := tx.SettingSet(ctx, "governor.max_children", "3"); err != nil {
			return err
		}
		return tx.SettingSet(ctx, "governor.max_children", "4")
	})
	if m, err := s.SettingList(ctx); err != nil || m["governor.max_children"] != "4" || len(m) != 1 {
		t.Fatalf("settings = %v, %v", m, err)
	}
	// Inside a transaction the settings read are those it and every earlier
	// Update wrote (a driver may keep them for a batch, never past a write),
	// and a failed Update's are undone for the next.
	failed := errors.New("undone")
	err := s.Update(ctx, func(tx store.Tx) error {
		if m, err := tx.SettingList(ctx); err != nil || m["governor.max_children"] != "4" {
			t.Errorf("settings in a transaction = %v, %v", m, err)
		}
		if err := tx.SettingSet(ctx, "governor.max_children", "9"); err != nil {
			return err
		}
		if m, err := tx.SettingList(ctx); err != nil || m["governor.max_children"] != "9" {
			t.Errorf("settings after a set in the same transaction = %v, %v", m, err)
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("failing update: %v", err)
	}
	update(t, s, func(tx store.Tx) error {
		if m, err := tx.SettingList(ctx); err != nil || m["governor.max_children"] != "4" {
			t.Errorf("settings after a failed update = %v, %v; its set must be undone", m, err)
		}
		return nil
	})
	update(t, s, func(tx store.Tx) error {
		for i, counted := range []bool{true, true, false, true} {
			if err := tx.SpawnRejectionInsert(ctx, store.SpawnRejectionInsertParams{Parent: r.ID, At: t0.Add(time.Duration(i) * time.Minute), Counted: counted}); err != nil {
				return err
			}
		}
		n, err := tx.SpawnRejectionCount(ctx, r.ID, t0.Add(time.Minute))
		if err != nil {
			return err
		}
		if n != 2 { // minutes 1 and 3; minute 2 is not counted
			return fmt.Errorf("counted rejections = %d, want 2", n)
		}
		until := t0.Add(time.Hour)
		if err := tx.AgentUpdateSpawnBlock(ctx, r.ID, until); err != nil {
			return err
		}
		a, err := tx.AgentGetByID(ctx, r.ID)
		if err != nil {
			return err
		}
		if !a.SpawnBlockedUntil.Equal(until) {
			return fmt.Errorf("blocked until = %v", a.SpawnBlockedUntil)
		}
		return nil
	})
}

// testFailedUpdateAlone: an Update alone in its batch (one after
// another) that fails after writing a row, its spend and an event leaves
// none of them, and the log goes on from where it was.
func testFailedUpdateAlone(t *testing.T, s store.Store) {
	ctx := context.Background()
	boom := errors.New("boom")
	a := Insert(t, s, "kept", 0)
	size0, err := s.LogSize(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		err := s.Update(ctx, func(tx store.Tx) error {
			if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("undone%d", i), 0, 0)}); err != nil {
				return err
			}
			if err := tx.SpendAdd(ctx, a.ID, 10, 0.5); err != nil {
				return err
			}
			if err := store.AppendEvent(ctx, tx, time.Now(), kin.EventAgentMessage, a.ID, 0, map[string]any{"agent": a.ID}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("update %d: %v, want %v", i, err, boom)
		}
	}
	update(t, s, func(tx store.Tx) error {
		return store.AppendEvent(ctx, tx, time.Now(), kin.EventAgentMessage, a.ID, 0, map[string]any{"agent": a.ID})
	})
	if size, err := s.LogSize(ctx); err != nil || size != size0+1 {
		t.Fatalf("the log's size %d, %v; want %d: only the successful update's event", size, err, size0+1)
	}
	all, err := s.AgentList(ctx, kin.AgentFilter{})
	if err != nil || len(all) != 1 || all[0].ID != a.ID {
		t.Fatalf("agents %+v, %v: the failed updates' agents were kept", all, err)
	}
	if spend, err := s.SpendList(ctx); err != nil || len(spend) != 0 {
		t.Fatalf("spend %+v, %v: the failed updates' spend was kept", spend, err)
	}
}

func testFailedUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Update(ctx, func(tx store.Tx) error {
				if _, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("a%d", i), 0, 0)}); err != nil {
					return err
				}
				if i%2 == 1 {
					return boom // after a write: it must be undone
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i%2 == 1) != errors.Is(err, boom) {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	all, err := s.AgentList(ctx, kin.AgentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10 {
		t.Fatalf("%d agents stored, want the 10 successful ones", len(all))
	}
	for _, a := range all {
		var i int
		fmt.Sscanf(a.Name, "a%d", &i)
		if i%2 == 1 {
			t.Fatalf("failed update's agent %s was kept", a.Name)
		}
	}
	// A panicking update is undone and reported, and the store goes on.
	err = s.Update(ctx, func(tx store.Tx) error {
		tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent("panic", 0, 0)})
		panic("update bug")
	})
	if err == nil {
		t.Fatal("panic not reported")
	}
	Insert(t, s, "after-panic", 0)
	if n, _ := s.AgentCount(ctx); n != 11 {
		t.Fatalf("count after panic = %d, want 11", n)
	}
}

// testSerialised checks that a read-then-write in one Update is never
// interleaved with another's: each update inserts an agent named after the
// count it read, so a race would produce a name clash or a gap.
func testSerialised(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Update(ctx, func(tx store.Tx) error {
				c, err := tx.AgentCountLive(ctx, store.AgentCountLiveParams{})
				if err != nil {
					return err
				}
				_, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: NewAgent(fmt.Sprintf("n%d", c), 0, 0)})
				return err
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("an update failed (not serialised?): %v", err)
		}
	}
	all, _ := s.AgentList(ctx, kin.AgentFilter{})
	for i, a := range all {
		if a.Name != fmt.Sprintf("n%d", i) {
			t.Fatalf("agent %d is %s", i, a.Name)
		}
	}
}

func testClose(t *testing.T, s store.Store) {
	Insert(t, s, "a", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	err := s.Update(context.Background(), func(tx store.Tx) error { return nil })
	if !errors.Is(err, store.ErrClosed) {
		t.Fatalf("update after close: %v", err)
	}
}

func testRuntime(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := NewAgent("worker", 0, 0)
	a.Command = []string{"/bin/sh", "-c", "echo 'hi, there'"}
	a.Restart, a.Grace, a.Replaces = kin.RestartOnFailure, kin.Duration(3*time.Second), 0
	var id kin.AgentID
	update(t, s, func(tx store.Tx) error {
		a.Result = kin.ResultRunning
		got, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, Env: []string{"A=1", "B=x=y"}, Dir: "/tmp", Handoff: []byte(`{"task":"t"}`)})
		if err == nil {
			id = got.ID
		}
		return err
	})
	spec, err := s.AgentProcessSpec(ctx, id)
	if err != nil || fmt.Sprint(spec.Command) != fmt.Sprint(a.Command) || fmt.Sprint(spec.Env) != "[A=1 B=x=y]" || spec.Dir != "/tmp" || spec.Restart != kin.RestartOnFailure || spec.Grace != a.Grace ||
		string(spec.Handoff) != `{"task":"t"}` {
		t.Fatalf("spec = %+v, %v", spec, err)
	}
	plain := Insert(t, s, "registered-only", 0)
	if _, err := s.AgentProcessSpec(ctx, plain.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("spec of a registered-only agent: %v", err)
	}
	pid, started, ended := 4242, t0.Add(time.Second), t0.Add(time.Minute)
	state, status, reason, cursor, session, result := kin.StateExited, kin.StatusTerminated, "crashed", "page=7", "default", kin.ResultFailed
	update(t, s, func(tx store.Tx) error {
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: id, At: started, PID: &pid, StartedAt: &started, Cursor: &cursor, LastHeartbeat: &started, Session: &session}); err != nil {
			return err
		}
		if got, err := tx.AgentGetByID(ctx, id); err != nil || got.Result != kin.ResultRunning || got.Session != session {
			return fmt.Errorf("after the start: %+v, %v", got, err)
		}
		return tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: id, At: ended, State: &state, Status: &status, EndedAt: &ended,
			Exit: &kin.Exit{Code: -1, Signal: "killed", Known: true}, EndReason: &reason, Result: &result})
	})
	got, err := s.AgentGetByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != pid || !got.StartedAt.Equal(started) || !got.EndedAt.Equal(ended) || got.State != state || got.Status != status ||
		got.Exit == nil || *got.Exit != (kin.Exit{Code: -1, Signal: "killed", Known: true}) || got.EndReason != reason ||
		got.Cursor != cursor || !got.LastHeartbeat.Equal(started) || fmt.Sprint(got.Command) != fmt.Sprint(a.Command) ||
		got.Restart != kin.RestartOnFailure || got.Grace != a.Grace || !got.UpdatedAt.Equal(ended) || got.Running() ||
		got.Session != session || got.Result != result {
		t.Fatalf("runtime fields = %+v", got)
	}
	if p, _ := s.AgentGetByID(ctx, plain.ID); p.Exit != nil || p.PID != 0 || !p.StartedAt.IsZero() || p.Command != nil || p.Session != "" || p.Result != "" {
		t.Fatalf("registered-only agent has runtime fields: %+v", p)
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: 999, At: t0, PID: &pid})
	}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of a missing agent: %v", err)
	}
}

// testUpdateMany: AgentUpdateMany sets the same fields of every agent
// it names, once each whatever the list repeats, and no other agent's; an
// unknown id fails the Update, which then changed none. AgentListLeanByIDs
// reads the fields a cancellation decides on as the whole rows have them.
func testUpdateMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	var ids []kin.AgentID
	for i := range 6 {
		ids = append(ids, Insert(t, s, fmt.Sprintf("u%d", i), 0).ID)
	}
	pid, started := 77, t0.Add(time.Second)
	update(t, s, func(tx store.Tx) error {
		return tx.AgentUpdateMany(ctx, ids, store.AgentUpdateParams{At: started, PID: &pid, StartedAt: &started})
	})
	ended := t0.Add(time.Minute)
	state, status, reason, result := kin.StateCancelled, kin.StatusTerminated, "parent_dead", kin.ResultCancelled
	exit := kin.Exit{Code: -1, Signal: "killed", Known: true}
	some := []kin.AgentID{ids[4], ids[0], ids[2], ids[0]}
	update(t, s, func(tx store.Tx) error {
		if err := tx.AgentUpdateMany(ctx, nil, store.AgentUpdateParams{At: ended, State: &state}); err != nil {
			return fmt.Errorf("no ids: %w", err)
		}
		return tx.AgentUpdateMany(ctx, some, store.AgentUpdateParams{At: ended, State: &state, Status: &status, EndedAt: &ended,
			Exit: &exit, EndReason: &reason, Result: &result})
	})
	for i, id := range ids {
		got, err := s.AgentGetByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.PID != pid || !got.StartedAt.Equal(started) {
			t.Fatalf("agent %d after the first update: pid %d started %v", id, got.PID, got.StartedAt)
		}
		if i%2 == 0 {
			if got.State != state || got.Status != status || !got.EndedAt.Equal(ended) || got.Exit == nil || *got.Exit != exit ||
				got.EndReason != reason || got.Result != result || !got.UpdatedAt.Equal(ended) || got.Name != fmt.Sprintf("u%d", i) {
				t.Fatalf("agent %d updated = %+v", id, got)
			}
		} else if got.State != kin.StateRegistered || got.Status != kin.StatusActive || !got.EndedAt.IsZero() || got.Exit != nil ||
			got.EndReason != "" || !got.UpdatedAt.Equal(started) {
			t.Fatalf("agent %d, not named, changed: %+v", id, got)
		}
	}
	// The lean rows: the fields a cancellation decides on, as the whole
	// rows have them, in the order asked, each id once.
	leanIDs := []kin.AgentID{ids[5], ids[0], 999, ids[3], ids[0]}
	lean, err := s.AgentListLeanByIDs(ctx, leanIDs)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := s.AgentListByIDs(ctx, leanIDs)
	if err != nil {
		t.Fatal(err)
	}
	if len(lean) != 3 || len(whole) != 3 {
		t.Fatalf("AgentListLeanByIDs(%v): %d rows, AgentListByIDs %d; want 3", leanIDs, len(lean), len(whole))
	}
	for i, l := range lean {
		w := whole[i]
		if l.ID != w.ID || l.Parent != w.Parent || l.Life != w.Life || l.Status != w.Status || l.State != w.State || l.PID != w.PID ||
			fmt.Sprint(l.Command) != fmt.Sprint(w.Command) || l.Grace != w.Grace || !l.EndedAt.Equal(w.EndedAt) || l.Result != w.Result ||
			l.Host != w.Host || l.Running() != w.Running() {
			t.Fatalf("lean row %d = %+v; whole row %+v", i, l, w)
		}
		if l.Name != "" || l.Exit != nil || !l.StartedAt.IsZero() {
			t.Fatalf("lean row %d has fields beyond the lean ones: %+v", i, l)
		}
	}
	// Its command and host, where they are set.
	worker := NewAgent("lean-worker", ids[0], 1)
	worker.Command, worker.Host, worker.Grace = []string{"/bin/sleep", "1, 2:3"}, "h2", kin.Duration(time.Second)
	update(t, s, func(tx store.Tx) error {
		a, err := tx.AgentInsert(ctx, store.AgentInsertParams{Agent: worker})
		if err != nil {
			return err
		}
		worker.ID = a.ID
		return nil
	})
	if got, err := s.AgentListLeanByIDs(ctx, []kin.AgentID{worker.ID}); err != nil || len(got) != 1 ||
		fmt.Sprint(got[0].Command) != fmt.Sprint(worker.Command) || got[0].Host != "h2" || got[0].Grace != worker.Grace || got[0].Parent != ids[0] {
		t.Fatalf("lean row of %+v: %+v, %v", worker, got, err)
	}

	// An unknown id among known ones: the Update fails and its writes are
	// undone.
	stopping := kin.StateStopping
	err = s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentUpdateMany(ctx, []kin.AgentID{ids[1], 999, ids[3]}, store.AgentUpdateParams{At: ended, State: &stopping})
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of an unknown agent among others: %v", err)
	}
	for _, id := range []kin.AgentID{ids[1], ids[3]} {
		if got, err := s.AgentGetByID(ctx, id); err != nil || got.State != kin.StateRegistered || !got.UpdatedAt.Equal(started) {
			t.Fatalf("agent %d after a failed update: %+v, %v", id, got, err)
		}
	}
}

func testPolicyAndSpend(t *testing.T, s store.Store) {
	ctx := context.Background()
	plain := Insert(t, s, "plain", 0)
	deadline := time.Unix(1_800_000_000, 7).UTC()
	var staged *kin.Agent
	update(t, s, func(tx store.Tx) error {
		a := NewAgent("staged", plain.ID, 1)
		a.Stage = "restricted"
		var err error
		staged, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, Policy: []byte(`{"env":["A*"]}`), DeadlineAt: deadline})
		return err
	})
	if got, err := s.AgentGetByID(ctx, staged.ID); err != nil || got.Stage != "restricted" {
		t.Fatalf("staged agent = %+v, %v", got, err)
	}
	rows, err := s.AgentPolicyList(ctx)
	if err != nil || len(rows) != 1 || rows[0].ID != staged.ID || rows[0].Stage != "restricted" ||
		string(rows[0].Policy) != `{"env":["A*"]}` || !rows[0].DeadlineAt.Equal(deadline) {
		t.Fatalf("policy rows = %+v, %v (only the staged agent has one)", rows, err)
	}
	full := "full"
	update(t, s, func(tx store.Tx) error {
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: staged.ID, At: deadline, Stage: &full}); err != nil {
			return err
		}
		if err := tx.SpendAdd(ctx, staged.ID, 100, 0.25); err != nil {
			return err
		}
		if err := tx.SpendAdd(ctx, staged.ID, 20, 0.5); err != nil {
			return err
		}
		return tx.SpendSetExhausted(ctx, plain.ID, "max_tokens")
	})
	if got, _ := s.AgentGetByID(ctx, staged.ID); got.Stage != "full" {
		t.Fatalf("stage after promotion = %q", got.Stage)
	}
	spend, err := s.SpendList(ctx)
	// staged is plain's child: its spend is in plain's subtree too.
	if err != nil || len(spend) != 2 || spend[0] != (store.SpendRow{ID: plain.ID, SubTokens: 120, SubCost: 0.75, Exhausted: "max_tokens"}) ||
		spend[1] != (store.SpendRow{ID: staged.ID, Tokens: 120, Cost: 0.75, SubTokens: 120, SubCost: 0.75}) {
		t.Fatalf("spend = %+v, %v", spend, err)
	}
}

// testEscalatedChain: an agent whose spawn was escalated (seed 002 §4.1)
// keeps who asked for it (RequestedBy), and its permission chain and its
// spend go through the asker, then on to every ancestor once.
func testEscalatedChain(t *testing.T, s store.Store) {
	ctx := context.Background()
	goA := Insert(t, s, "GO", 0)
	po := Insert(t, s, "PO-1", goA.ID)
	spec := Insert(t, s, "S-1", po.ID)
	var w *kin.Agent
	update(t, s, func(tx store.Tx) error {
		a := NewAgent("W-1", po.ID, po.Generation+1)
		a.Role, a.RequestedBy = "Worker", spec.ID
		var err error
		w, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a})
		return err
	})
	if got, err := s.AgentGetByID(ctx, w.ID); err != nil || got.RequestedBy != spec.ID || got.Parent != po.ID {
		t.Fatalf("the escalated agent = %+v, %v", got, err)
	}
	update(t, s, func(tx store.Tx) error { return tx.SpendAdd(ctx, w.ID, 7, 0) })
	chain, err := s.PermChain(ctx, w.ID)
	if err != nil || len(chain) != 4 {
		t.Fatalf("PermChain = %+v, %v", chain, err)
	}
	for i, want := range []kin.AgentID{w.ID, spec.ID, po.ID, goA.ID} {
		if chain[i].ID != want || chain[i].Spend.SubTokens != 7 {
			t.Errorf("chain[%d] = %d with %d subtree tokens, want %d with 7", i, chain[i].ID, chain[i].Spend.SubTokens, want)
		}
	}
	if chain[0].RequestedBy != spec.ID || chain[0].Parent != po.ID || chain[0].Role != "Worker" || chain[1].RequestedBy != 0 {
		t.Errorf("the chain's links: %+v", chain)
	}
	// The lineage is the parent's: the asker is not an ancestor.
	if anc, err := s.AgentAncestors(ctx, w.ID); err != nil || len(anc) != 3 || anc[1].ID != po.ID {
		t.Errorf("ancestors = %v, %v", anc, err)
	}
	rows, err := s.AgentPolicyList(ctx)
	if err != nil || len(rows) != 1 || rows[0].ID != w.ID || rows[0].RequestedBy != spec.ID {
		t.Errorf("AgentPolicyList = %+v, %v; want the escalated agent with its asker", rows, err)
	}
}

// testBudgetCounters: the counters budgets are checked against are kept by
// the store, in the transaction that changes them, for the agent and each
// ancestor, and PermChain reads them back inside later transactions.
func testBudgetCounters(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := Insert(t, s, "a", 0)
	b := Insert(t, s, "b", a.ID)
	c := Insert(t, s, "c", b.ID)
	other := Insert(t, s, "other", 0)
	update(t, s, func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, c.ID, 10, 0.5); err != nil {
			return err
		}
		if err := tx.SpendSpawnAdd(ctx, []kin.AgentID{a.ID, b.ID}); err != nil {
			return err
		}
		// Inside the same transaction, the counters include what it wrote.
		chain, err := tx.PermChain(ctx, c.ID)
		if err != nil {
			return err
		}
		if len(chain) != 3 || chain[0].ID != c.ID || chain[1].ID != b.ID || chain[2].ID != a.ID ||
			chain[2].Spend.SubTokens != 10 || chain[2].Spend.Spawns != 1 || chain[0].Spend.Tokens != 10 {
			t.Errorf("PermChain inside the transaction = %+v", chain)
		}
		return tx.SpendSpawnAdd(ctx, []kin.AgentID{a.ID})
	})
	failed := errors.New("undone")
	if err := s.Update(ctx, func(tx store.Tx) error {
		if err := tx.SpendAdd(ctx, c.ID, 1000, 1); err != nil {
			return err
		}
		if err := tx.SpendSpawnAdd(ctx, []kin.AgentID{a.ID}); err != nil {
			return err
		}
		return failed
	}); !errors.Is(err, failed) {
		t.Fatalf("failing update: %v", err)
	}
	chain, err := s.PermChain(ctx, c.ID)
	if err != nil || len(chain) != 3 {
		t.Fatalf("PermChain = %+v, %v", chain, err)
	}
	want := []store.SpendRow{
		{ID: c.ID, Tokens: 10, Cost: 0.5, SubTokens: 10, SubCost: 0.5},
		{ID: b.ID, SubTokens: 10, SubCost: 0.5, Spawns: 1},
		{ID: a.ID, SubTokens: 10, SubCost: 0.5, Spawns: 2},
	}
	for i, w := range want {
		if chain[i].Spend != w {
			t.Errorf("chain[%d].Spend = %+v, want %+v (a failed update's counters are undone)", i, chain[i].Spend, w)
		}
	}
	if chain[1].Parent != a.ID || chain[2].Parent != 0 {
		t.Errorf("parents in the chain: %+v", chain)
	}
	// The first row carries the whole agent (a registration's parent), the
	// others none.
	if got, err := s.AgentGetByID(ctx, c.ID); err != nil || chain[0].Agent == nil || !reflect.DeepEqual(chain[0].Agent, got) || chain[1].Agent != nil || chain[2].Agent != nil {
		t.Errorf("PermChain's agents: %+v, %+v, %+v; want %+v first, then none (%v)", chain[0].Agent, chain[1].Agent, chain[2].Agent, got, err)
	}
	if got, err := s.PermChain(ctx, other.ID); err != nil || len(got) != 1 || got[0].Spend != (store.SpendRow{ID: other.ID}) {
		t.Errorf("an agent without spend: %+v, %v", got, err)
	}
	if got, err := s.PermChain(ctx, 9999); err != nil || len(got) != 0 {
		t.Errorf("an unknown agent's chain: %+v, %v", got, err)
	}
}

func testIdentity(t *testing.T, s store.Store) {
	ctx := context.Background()
	top := Insert(t, s, "top", 0)
	sub := Insert(t, s, "sub", top.ID)
	at := time.Unix(1_800_000_000, 0).UTC()
	key := store.AgentKeyRow{Agent: sub.ID, JKT: "jkt-sub", PublicKey: []byte{1, 2, 3}, Local: "top+sub", CreatedAt: at}
	update(t, s, func(tx store.Tx) error { return tx.AgentKeyInsert(ctx, key) })
	if got, err := s.AgentKeyByJKT(ctx, "jkt-sub"); err != nil || got.Agent != sub.ID || got.Local != "top+sub" || string(got.PublicKey) != "\x01\x02\x03" || !got.CreatedAt.Equal(at) {
		t.Fatalf("AgentKeyByJKT = %+v, %v", got, err)
	}
	if _, err := s.AgentKeyGet(ctx, top.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("AgentKeyGet of an agent without a key: %v, want ErrNotFound", err)
	}
	if err := s.Update(ctx, func(tx store.Tx) error {
		return tx.AgentKeyInsert(ctx, store.AgentKeyRow{Agent: top.ID, JKT: "jkt-sub", PublicKey: []byte{4}, Local: "top", CreatedAt: at})
	}); err == nil {
		t.Fatal("a second key with the same thumbprint was stored")
	}

	g := store.GrantRow{Agent: top.ID, Resource: "https://r.example", Scope: "data.read", CreatedAt: at}
	update(t, s, func(tx store.Tx) error { return tx.GrantSet(ctx, g) })
	g.Scope, g.Until = "data.read data.write", at.Add(time.Hour)
	update(t, s, func(tx store.Tx) error { return tx.GrantSet(ctx, g) })
	if gs, err := s.GrantList(ctx, 0); err != nil || len(gs) != 1 || gs[0] != g {
		t.Fatalf("grants = %+v, %v; want the replaced grant only", gs, err)
	}

	tok := func(jti string, agent, parent kin.AgentID, exp time.Time) store.AuthTokenRow {
		return store.AuthTokenRow{JTI: jti, Agent: agent, Parent: parent, Resource: "https://r.example", Scope: "data.read", IssuedAt: at, ExpiresAt: exp}
	}
	update(t, s, func(tx store.Tx) error {
		for _, r := range []store.AuthTokenRow{
			tok("a", sub.ID, top.ID, at.Add(time.Hour)),
			tok("b", sub.ID, top.ID, at.Add(time.Minute)),
			tok("old", sub.ID, top.ID, at.Add(-time.Minute)),
		} {
			if err := tx.AuthTokenInsert(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if l, err := s.AuthTokenList(ctx, top.ID, at); err != nil || len(l) != 2 {
		t.Fatalf("unexpired tokens of top = %+v, %v; want a and b", l, err)
	}
	var revoked []store.AuthTokenRow
	update(t, s, func(tx store.Tx) error {
		var err error
		revoked, err = tx.AuthTokenRevoke(ctx, store.AuthTokenRevokeParams{Parent: top.ID, Resource: "https://r.example", At: at, Reason: "grant revoked"})
		return err
	})
	if len(revoked) != 2 {
		t.Fatalf("revoked %+v; want the two unexpired tokens", revoked)
	}
	if got, err := s.AuthTokenGet(ctx, "a"); err != nil || !got.RevokedAt.Equal(at) || got.RevokedReason != "grant revoked" {
		t.Fatalf("token a after revocation = %+v, %v", got, err)
	}
	update(t, s, func(tx store.Tx) error {
		again, err := tx.AuthTokenRevoke(ctx, store.AuthTokenRevokeParams{Agents: []kin.AgentID{sub.ID}, At: at, Reason: "stopped"})
		if err == nil && len(again) != 0 {
			t.Errorf("revoked again: %+v", again)
		}
		return err
	})
	update(t, s, func(tx store.Tx) error { return tx.AuthTokenPrune(ctx, at) })
	if _, err := s.AuthTokenGet(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("expired token after prune: %v", err)
	}
	var deleted bool
	update(t, s, func(tx store.Tx) error {
		var err error
		deleted, err = tx.GrantDelete(ctx, top.ID, "https://r.example")
		return err
	})
	if gs, _ := s.GrantList(ctx, top.ID); !deleted || len(gs) != 0 {
		t.Fatalf("after GrantDelete: deleted=%v grants=%+v", deleted, gs)
	}
}
