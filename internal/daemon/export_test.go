package daemon

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
)

// CacheDiff says how the daemon's caches (the lineage, the permission
// state, the governor's profile) differ from what the store holds, or ""
// when they agree: each cache is rebuilt from the store and compared.
func (d *Daemon) CacheDiff(ctx context.Context) (string, error) {
	var diffs []string
	links, err := d.store.AgentLinks(ctx)
	if err != nil {
		return "", err
	}
	if n := d.lineage.Len(); n != len(links) {
		diffs = append(diffs, fmt.Sprintf("lineage: %d agents cached, %d stored", n, len(links)))
	}
	for _, l := range links {
		if p := d.lineage.Parent(l.ID); p != l.Parent {
			diffs = append(diffs, fmt.Sprintf("lineage: agent %d's parent %d cached, %d stored", l.ID, p, l.Parent))
		}
	}

	perm, err := d.Authority.CacheDiff(ctx)
	if err != nil {
		return "", err
	}
	diffs = append(diffs, perm...)

	settings, err := d.store.SettingList(ctx)
	if err != nil {
		return "", err
	}
	prof, overrides, err := profileWith(d.baseProfile, settings)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	if !reflect.DeepEqual(prof, d.profile) || !maps.Equal(overrides, d.overrides) {
		diffs = append(diffs, fmt.Sprintf("governor: cached %+v %v, stored %+v %v", d.profile, d.overrides, prof, overrides))
	}
	d.mu.Unlock()
	return strings.Join(diffs, "\n"), nil
}
