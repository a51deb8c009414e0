package daemon

import (
	"context"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// CacheDiff says how the daemon's caches (the registry's lineage and
// governor profile, the authority's policies and spend) differ from what
// the store holds, or "" when they agree: each cache is rebuilt from the
// store and compared.
func (d *Daemon) CacheDiff(ctx context.Context) (string, error) {
	reg, err := d.Registry.CacheDiff(ctx)
	if err != nil {
		return "", err
	}
	auth, err := d.Authority.CacheDiff(ctx)
	if err != nil {
		return "", err
	}
	return strings.Join(append(reg, auth...), "\n"), nil
}

// ModelCredential is agent id's model gateway credential (what its
// environment holds as OPENAI_API_KEY).
func (d *Daemon) ModelCredential(id kin.AgentID) string { return d.gateway.Credential(id) }

// WriterRoundTrips is the daemon's store's count of its writer's round
// trips to the server, where it counts them (PostgreSQL's); ok false
// otherwise.
func (d *Daemon) WriterRoundTrips() (n int64, ok bool) {
	t, ok := d.store.(interface{ WriterRoundTrips() int64 })
	if !ok {
		return 0, false
	}
	return t.WriterRoundTrips(), true
}
