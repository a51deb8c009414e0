package kin_test

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

// TestSpawnRequestHost: a placement names a host as kin serve's
// --host-name takes it; anything else is invalid before it reaches a
// transaction.
func TestSpawnRequestHost(t *testing.T) {
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"", true}, {"a", true}, {"gpu-2", true}, {"host.example", true}, {"h_1", true},
		{strings.Repeat("h", kin.MaxHostNameLen), true},
		{strings.Repeat("h", kin.MaxHostNameLen+1), false},
		{"-a", false}, {"a-", false}, {"a b", false}, {"a/b", false}, {"a\x00", false}, {"é", false},
	} {
		req := kin.SpawnRequest{Command: []string{"/bin/true"}, Host: c.host}
		err := req.ValidateProcess()
		if (err == nil) != c.ok {
			t.Errorf("host %q: %v, want ok %v", c.host, err, c.ok)
		}
		if err != nil && (kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.HasPrefix(kin.ErrorMessageOf(err), "host: ")) {
			t.Errorf("host %q: %v; want invalid, naming the host", c.host, err)
		}
	}
}
