package runner

import (
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// TestSharedEnvKeys: agents whose environments have the same names, in the
// same order, share one slice of names; another list of names gets its
// own; a name never points into the KEY=VALUE string it was cut from (that
// kept every agent's whole environment in memory).
func TestSharedEnvKeys(t *testing.T) {
	run := &Runner{}
	a := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=1", "EMPTY="})
	if want := []string{"PATH", "KIN_AGENT_ID", "EMPTY"}; !slices.Equal(a, want) {
		t.Fatalf("names %q, want %q", a, want)
	}
	env := []string{"PATH=/usr/bin", "KIN_AGENT_ID=2", "EMPTY="}
	b := run.sharedEnvKeys(env)
	if unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Fatalf("the same names were not shared: %q and %q", a, b)
	}
	c := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=3", "EXTRA=x"})
	if want := []string{"PATH", "KIN_AGENT_ID", "EXTRA"}; !slices.Equal(c, want) {
		t.Fatalf("names %q, want %q", c, want)
	}
	if unsafe.SliceData(c) == unsafe.SliceData(a) {
		t.Fatal("other names share the earlier slice")
	}
	kv := "NEW=a value the names must not keep"
	if d := run.sharedEnvKeys([]string{kv}); unsafe.StringData(d[0]) == unsafe.StringData(kv) {
		t.Fatalf("name %q points into %q", d[0], kv)
	}
	if got := run.sharedEnvKeys(nil); len(got) != 0 {
		t.Fatalf("no environment gave names %q", got)
	}
}

// TestSharedEnvKeysAlternating: agents of two shapes spawned alternately
// (concurrent spawns) share one slice per shape; it failed when only the
// last shape was remembered (every switch made a new slice). Beyond
// maxEnvShapes shapes, a new shape still gets its names, unshared.
func TestSharedEnvKeysAlternating(t *testing.T) {
	run := &Runner{}
	x1 := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=1"})
	y1 := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=2", "KIN_HANDOFF=h"})
	x2 := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=3"})
	y2 := run.sharedEnvKeys([]string{"PATH=/bin", "KIN_AGENT_ID=4", "KIN_HANDOFF=h"})
	if unsafe.SliceData(x1) != unsafe.SliceData(x2) || unsafe.SliceData(y1) != unsafe.SliceData(y2) {
		t.Fatalf("alternating shapes were not shared: %q %q %q %q", x1, x2, y1, y2)
	}
	for i := range maxEnvShapes + 2 {
		name := "V" + strings.Repeat("x", i)
		if got := run.sharedEnvKeys([]string{name + "=1"}); !slices.Equal(got, []string{name}) {
			t.Fatalf("shape %d: names %q, want [%s]", i, got, name)
		}
	}
	if len(run.envKeys) != maxEnvShapes {
		t.Fatalf("%d shapes remembered, want at most %d", len(run.envKeys), maxEnvShapes)
	}
}
