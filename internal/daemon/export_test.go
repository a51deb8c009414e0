package daemon

import (
	"context"
	"strings"
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
