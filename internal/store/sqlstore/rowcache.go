package sqlstore

import (
	"sync"

	"github.com/kin-agents/kin/kin"
)

// The row cache (Config.RowCache): the packed rows (agentColumns) of the
// agents that large reads by id read (cachedReadMin ids or more: a
// subtree's rows for the API's tree, AgentRowsByIDs, and for Daemon.Tree,
// AgentListByIDs), kept between reads so that a tree read again costs map
// lookups instead of SQLite reading 36 columns a row and seeking each id
// (issue 22: the 10,000-agent subtree). Only where this handle's writer
// is the database's only writer: the cache learns of a change from the
// writer's own commits, never from another handle's.
//
// What keeps it right: a read never answers a row older than a write
// committed before the read began. The writer's commit that changed
// agents (AgentUpdate, AgentUpdateStatus, AgentUpdateMany,
// AgentUpdateSpawnBlock: an insert changes no row a read could have
// cached) does, under the cache's lock,
//
//   - before its COMMIT (committing): drops those ids' rows and marks them
//     pending, so that no read finds them and no read puts them back;
//   - after its COMMIT, whether it succeeded or not (committed): counts
//     the commit (seq) and records which ids it wrote (recent), then
//     clears the marks.
//
// A read notes seq when it begins (begin), answers the rows it finds, and
// reads the others from the database. It puts those back (fill) only if no
// commit counted after its begin wrote them and none is pending: a commit
// it may have read around. Where the commits since its begin are no
// longer all in recent (more than maxRecent commits, or maxRecentIDs
// ids), it puts nothing back. So a row in the cache is always the row of
// the last commit that wrote it, or a read's that began after that commit
// was counted.
type rowCache struct {
	mu        sync.Mutex
	rows      map[kin.AgentID]string
	bytes     int // the rows' text
	max       int // bytes past which rows are dropped (to 3/4 of it)
	seq       uint64
	recent    []rowWrites // the last commits that wrote agents, oldest first
	recentIDs int         // the ids in recent
	known     uint64      // every commit counted after this one is in recent
	pending   map[kin.AgentID]struct{}
}

// rowWrites is the ids the commit counted seq wrote.
type rowWrites struct {
	seq uint64
	ids []kin.AgentID
}

const (
	// cachedReadMin is the number of ids from which a read by id goes
	// through the row cache: the large reads it is for; a small one costs
	// the database little and leaves the daemon's memory as it was.
	cachedReadMin = 1024
	// rowCacheBytes bounds the rows' text the cache holds: about 100,000
	// agents of the benchmarks' rows (about 280 bytes each, and some 60
	// of the map's own a row).
	rowCacheBytes = 32 << 20
	// maxRecent and maxRecentIDs bound what the cache remembers of the
	// commits a read may have overlapped (rowWrites).
	maxRecent    = 256
	maxRecentIDs = 1 << 16
	// getBatch is how many ids a read looks up under one hold of the
	// lock.
	getBatch = 1024
)

func newRowCache(max int) *rowCache {
	return &rowCache{rows: map[kin.AgentID]string{}, max: max, pending: map[kin.AgentID]struct{}{}}
}

// begin is what a read notes before it reads anything: the commits
// counted so far.
func (c *rowCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// get sets rows[i] to ids[i]'s cached row, "" where there is none, and
// returns how many there were not. It takes the lock for getBatch ids at
// a time, so that the writer's commits wait little for a large read
// (rows found after a commit it let through are that commit's or later:
// a read of several snapshots, as the parallel chunks of a read are).
func (c *rowCache) get(ids []kin.AgentID, rows []string) (missing int) {
	for lo := 0; lo < len(ids); lo += getBatch {
		hi := min(lo+getBatch, len(ids))
		c.mu.Lock()
		for i := lo; i < hi; i++ {
			if rows[i] = c.rows[ids[i]]; rows[i] == "" {
				missing++
			}
		}
		c.mu.Unlock()
	}
	return missing
}

// fill puts rows (ids[i]'s row is rows[i]), read by a read that began at
// since, in the cache, except those a commit it may have read around
// wrote.
func (c *rowCache) fill(since uint64, ids []kin.AgentID, rows []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if since < c.known {
		return // commits since are forgotten: any may have written these
	}
	var written map[kin.AgentID]struct{}
	for _, w := range c.recent {
		if w.seq <= since {
			continue
		}
		if written == nil {
			written = map[kin.AgentID]struct{}{}
		}
		for _, id := range w.ids {
			written[id] = struct{}{}
		}
	}
	for i, id := range ids {
		if _, ok := written[id]; ok {
			continue
		}
		if _, ok := c.pending[id]; ok {
			continue
		}
		c.bytes += len(rows[i]) - len(c.rows[id])
		c.rows[id] = rows[i]
	}
	if c.bytes > c.max {
		// Some rows go (the map's order: any), down to three quarters.
		for id, row := range c.rows {
			if c.bytes <= c.max/4*3 {
				break
			}
			delete(c.rows, id)
			c.bytes -= len(row)
		}
	}
}

// committing is called before the COMMIT of a transaction that wrote ids'
// rows: they are dropped, and kept out until committed.
func (c *rowCache) committing(ids []kin.AgentID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.pending[id] = struct{}{}
		c.drop(id)
	}
}

// committed is called once the COMMIT that committing preceded returned,
// whatever it returned.
func (c *rowCache) committed(ids []kin.AgentID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.recent = append(c.recent, rowWrites{seq: c.seq, ids: ids})
	c.recentIDs += len(ids)
	for len(c.recent) > maxRecent || c.recentIDs > maxRecentIDs {
		c.known = c.recent[0].seq
		c.recentIDs -= len(c.recent[0].ids)
		c.recent[0] = rowWrites{}
		c.recent = c.recent[1:]
	}
	for _, id := range ids {
		delete(c.pending, id) // dropped at committing, and no read put it back since
	}
}

func (c *rowCache) drop(id kin.AgentID) {
	if row, ok := c.rows[id]; ok {
		delete(c.rows, id)
		c.bytes -= len(row)
	}
}

// CachedRows is how many rows the row cache holds (0 without one): for
// tests that check a read went through it.
func (s *Store) CachedRows() int {
	if s.rc == nil {
		return 0
	}
	s.rc.mu.Lock()
	defer s.rc.mu.Unlock()
	return len(s.rc.rows)
}
