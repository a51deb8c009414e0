package daemon

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/kin-agents/kin/kin"
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

	own, spend, err := readPerms(ctx, d.store)
	if err != nil {
		return "", err
	}
	d.perm.mu.Lock()
	for _, id := range unionKeys(own, d.perm.own) {
		a, b := own[id], d.perm.own[id]
		if (a == nil) != (b == nil) || a != nil && (a.stage != b.stage || !a.deadlineAt.Equal(b.deadlineAt) || !reflect.DeepEqual(a.policy, b.policy)) {
			diffs = append(diffs, fmt.Sprintf("perms: agent %d's own policy cached %+v, stored %+v", id, b, a))
		}
	}
	for _, id := range unionKeys(spend, d.perm.spend) {
		var a, b spendRec
		if r := spend[id]; r != nil {
			a = *r
		}
		if r := d.perm.spend[id]; r != nil {
			b = *r
		}
		if a != b {
			diffs = append(diffs, fmt.Sprintf("perms: agent %d's spend cached %+v, stored %+v", id, b, a))
		}
	}
	d.perm.mu.Unlock()

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

func unionKeys[V any](a, b map[kin.AgentID]V) []kin.AgentID {
	ids := slices.Collect(maps.Keys(a))
	for id := range b {
		if _, ok := a[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
