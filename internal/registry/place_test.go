package registry

import (
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

// TestPlaceHost is the default placement: the host asked for; else the
// parent's when the parent is an agent running on a host; else the host
// that received the spawn. A daemon outside a fleet places nothing.
func TestPlaceHost(t *testing.T) {
	running := func(host string) *kin.Agent { return &kin.Agent{ID: 1, Host: host, PID: 42} }
	ended := &kin.Agent{ID: 1, Host: "c", PID: 42, EndedAt: time.Unix(1e9, 0)}
	registered := &kin.Agent{ID: 1, Host: "c"} // no process: kin register
	for _, c := range []struct {
		name, self, asked string
		parent            *kin.Agent
		want              string
	}{
		{"asked", "a", "c", nil, "c"},
		{"asked over the parent's", "a", "b", running("c"), "b"},
		{"asked this host", "a", "a", running("c"), "a"},
		{"a root: this host", "a", "", nil, "a"},
		{"beside a running parent", "a", "", running("c"), "c"},
		{"a parent on this host", "a", "", running("a"), "a"},
		{"a parent with no process: this host", "a", "", registered, "a"},
		{"an ended parent: this host (the governor refuses it)", "a", "", ended, "a"},
		{"a parent from before the fleet: this host", "a", "", running(""), "a"},
		{"outside a fleet", "", "", running("c"), ""},
		{"outside a fleet, asked", "", "c", nil, "c"}, // then refused: not a host of a fleet
	} {
		r := &Registry{host: c.self}
		if got := r.placeHost(c.asked, c.parent); got != c.want {
			t.Errorf("%s: placeHost(%q, %+v) on %q = %q, want %q", c.name, c.asked, c.parent, c.self, got, c.want)
		}
	}
}
