package sqlstore

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestRowCacheRefuses: the cases where a read's rows must not go into the
// row cache (rowcache.go), and its bound.
func TestRowCacheRefuses(t *testing.T) {
	c := newRowCache(1000)
	row := func(id kin.AgentID) string { return id.String() + ",x" }
	has := func(id kin.AgentID) bool {
		got := make([]string, 1)
		return c.get([]kin.AgentID{id}, got) == 0 && got[0] == row(id)
	}
	// A read that began before a commit that wrote 1 keeps 2, not 1.
	since := c.begin()
	c.committing([]kin.AgentID{1})
	c.committed([]kin.AgentID{1})
	c.fill(since, []kin.AgentID{1, 2}, []string{row(1), row(2)})
	if has(1) || !has(2) {
		t.Fatalf("after a commit of agent 1 during the read: cached 1 %v (want false), 2 %v (want true)", has(1), has(2))
	}
	// A read that began after it keeps 1.
	c.fill(c.begin(), []kin.AgentID{1}, []string{row(1)})
	if !has(1) {
		t.Fatal("a read after the commit did not keep agent 1")
	}
	// A commit under way: its ids are dropped, not found and not kept.
	c.committing([]kin.AgentID{2, 3})
	c.fill(c.begin(), []kin.AgentID{2, 3}, []string{row(2), row(3)})
	if has(2) || has(3) {
		t.Fatal("rows of a commit under way were kept or found")
	}
	c.committed([]kin.AgentID{2, 3})
	// A read older than what the cache remembers of commits keeps nothing.
	since = c.begin()
	for i := range maxRecent + 1 {
		ids := []kin.AgentID{kin.AgentID(100 + i)}
		c.committing(ids)
		c.committed(ids)
	}
	c.fill(since, []kin.AgentID{4}, []string{row(4)})
	if has(4) {
		t.Fatal("a read from before forgotten commits kept a row")
	}
	// One commit of more ids than it remembers forgets too.
	since = c.begin()
	many := make([]kin.AgentID, maxRecentIDs+1)
	for i := range many {
		many[i] = kin.AgentID(1000 + i)
	}
	c.committing(many)
	c.committed(many)
	c.fill(since, []kin.AgentID{5}, []string{row(5)})
	if has(5) {
		t.Fatal("a read from before a commit too large to remember kept a row")
	}
	// The bound: rows past max bytes are dropped down to three quarters.
	var ids []kin.AgentID
	var rows []string
	for i := range 50 {
		id := kin.AgentID(10 + i)
		ids, rows = append(ids, id), append(rows, row(id)+strings.Repeat("y", 40))
	}
	c.fill(c.begin(), ids, rows)
	if c.bytes > c.max || c.bytes == 0 {
		t.Fatalf("%d bytes of rows cached, want 1 to %d", c.bytes, c.max)
	}
	sum := 0
	for _, r := range c.rows {
		sum += len(r)
	}
	if sum != c.bytes {
		t.Fatalf("the rows are %d bytes, the cache counts %d", sum, c.bytes)
	}
}
