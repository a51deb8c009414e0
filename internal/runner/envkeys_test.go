package runner

import (
	"slices"
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
