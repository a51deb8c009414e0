package uidrange

import (
	"fmt"
	"strconv"
	"strings"
)

// Range is COUNT uids from START: agent id N runs as START+N, so ids 1 to
// COUNT-1 fit (id 0 is never an agent; START itself stays unused).
type Range struct {
	Start uint32
	Count uint32
}

// Bounds of a range.
const (
	// MinStart keeps agents off the uids distributions give to system
	// users and services.
	MinStart = 1000
	// maxEnd is one past the last usable uid: (uid_t)-1 means "no change"
	// to chown and setresuid, so it is never a real uid.
	maxEnd = 1<<32 - 1
)

// Defaults of an automatically allocated range.
const (
	// DefaultStart is where automatic allocation starts looking: the base
	// every root daemon used before ranges existed (so a lone daemon's
	// agents keep their uids), above the ordinary users of Debian and
	// Fedora (below 60000-65535).
	DefaultStart = 200000
	// DefaultCount is 2^20 uids. A home never reuses an agent id, so the
	// count bounds how many agents a home can ever spawn: about a million
	// is years of a busy workstation. Ranges are kept below 2^31 (many
	// tools treat larger uids as negative), which leaves room for about
	// 2000 daemons on one host.
	DefaultCount = 1 << 20
	// autoEnd bounds automatic allocation (see DefaultCount).
	autoEnd = 1 << 31
)

// Parse reads START:COUNT, both decimal.
func Parse(s string) (Range, error) {
	start, count, ok := strings.Cut(s, ":")
	if !ok {
		return Range{}, fmt.Errorf("uid range %q is not START:COUNT (e.g. %d:%d)", s, DefaultStart, DefaultCount)
	}
	st, err := strconv.ParseUint(start, 10, 32)
	if err != nil {
		return Range{}, fmt.Errorf("uid range %q: start %q is not a whole number below 2^32", s, start)
	}
	n, err := strconv.ParseUint(count, 10, 32)
	if err != nil {
		return Range{}, fmt.Errorf("uid range %q: count %q is not a whole number below 2^32", s, count)
	}
	r := Range{Start: uint32(st), Count: uint32(n)}
	if err := r.Validate(); err != nil {
		return Range{}, err
	}
	return r, nil
}

// Validate says what is wrong with r.
func (r Range) Validate() error {
	switch {
	case r.Count < 2:
		return fmt.Errorf("uid range %s: count must be at least 2 (agent ids start at 1)", r)
	case r.Start < MinStart:
		return fmt.Errorf("uid range %s: start must be at least %d (lower uids belong to the system)", r, MinStart)
	case r.End() > maxEnd:
		return fmt.Errorf("uid range %s: ends past uid %d (the largest uid is %d)", r, r.End()-1, uint64(maxEnd-1))
	}
	return nil
}

// String is START:COUNT, what Parse reads.
func (r Range) String() string { return fmt.Sprintf("%d:%d", r.Start, r.Count) }

// End is one past the last uid of r.
func (r Range) End() uint64 { return uint64(r.Start) + uint64(r.Count) }

// Span is the uids of r as "first-last".
func (r Range) Span() string { return fmt.Sprintf("%d-%d", r.Start, r.End()-1) }

// Overlaps says whether r and o share a uid.
func (r Range) Overlaps(o Range) bool {
	return r.Count > 0 && o.Count > 0 && uint64(r.Start) < o.End() && uint64(o.Start) < r.End()
}

// UID is the uid agent id runs as, or an error naming the range when id is
// outside it: an id past the count must never wrap into a uid of another
// daemon or user.
func (r Range) UID(id uint64) (uint32, error) {
	if id == 0 || id >= uint64(r.Count) {
		return 0, fmt.Errorf("agent id %d is outside this daemon's uid range %s (ids 1 to %d fit): this home has used every uid of its range; run more agents from another home (kin serve --home)", id, r, r.Count-1)
	}
	return r.Start + uint32(id), nil
}
