package registry

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// loadGovernor (re)builds the cached profile from the operator's stored
// settings.
func (r *Registry) loadGovernor(ctx context.Context) error {
	settings, err := r.st.SettingList(ctx)
	if err != nil {
		return fmt.Errorf("read governor settings: %w", err)
	}
	prof, overrides, err := profileWith(r.baseProfile, settings)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.profile, r.overrides, r.settings = prof, overrides, settings
	r.mu.Unlock()
	return nil
}

// profileWith is base with the operator's stored overrides applied, and
// the overrides.
func profileWith(base kin.Profile, settings map[string]string) (kin.Profile, map[string]string, error) {
	prof := base
	overrides := map[string]string{}
	for k, v := range settings {
		key, ok := strings.CutPrefix(k, "governor.")
		if !ok || v == "" { // "": reset to the profile's value
			continue
		}
		n, err := strconv.Atoi(v)
		if err == nil {
			err = governor.SetSetting(&prof, key, n)
		}
		if err != nil {
			return prof, nil, fmt.Errorf("stored governor setting %s=%q: %v", key, v, err)
		}
		overrides[key] = v
	}
	return prof, overrides, nil
}

// governorInTx is the profile in force as the store has it inside a
// transaction: a change another write made a moment ago counts. The cached
// profile is reused while the stored settings are those it was made from.
func (r *Registry) governorInTx(ctx context.Context, tx store.Tx) (kin.Profile, error) {
	settings, err := tx.SettingList(ctx)
	if err != nil {
		return kin.Profile{}, err
	}
	r.mu.Lock()
	prof, same := r.profile, sameGovernor(settings, r.settings)
	r.mu.Unlock()
	if same {
		return prof, nil
	}
	prof, _, err = profileWith(r.baseProfile, settings)
	return prof, err
}

// ProfileSource says where the governor's base profile came from (a
// shipped profile's name or a file).
func (r *Registry) ProfileSource() string { return r.profileSource }

// Profile returns a snapshot of the cached profile in force, for what
// only reads it.
func (r *Registry) Profile() kin.Profile {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.profile
}

// CacheDiff lists how the registry's caches (the lineage, the governor's
// profile) differ from what the store holds: each difference in words, none
// when they agree.
func (r *Registry) CacheDiff(ctx context.Context) ([]string, error) {
	var diffs []string
	links, err := r.st.AgentLinks(ctx)
	if err != nil {
		return nil, err
	}
	if n := r.lin.Len(); n != len(links) {
		diffs = append(diffs, fmt.Sprintf("lineage: %d agents cached, %d stored", n, len(links)))
	}
	for _, l := range links {
		if p := r.lin.Parent(l.ID); p != l.Parent {
			diffs = append(diffs, fmt.Sprintf("lineage: agent %d's parent %d cached, %d stored", l.ID, p, l.Parent))
		}
	}
	settings, err := r.st.SettingList(ctx)
	if err != nil {
		return nil, err
	}
	prof, overrides, err := profileWith(r.baseProfile, settings)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !reflect.DeepEqual(prof, r.profile) || !maps.Equal(overrides, r.overrides) {
		diffs = append(diffs, fmt.Sprintf("governor: cached %+v %v, stored %+v %v", r.profile, r.overrides, prof, overrides))
	}
	return diffs, nil
}

// Superseded reports whether a, back from offline (its host's lease had
// run out, and its host now holds it again), lost its cardinality slot
// meanwhile: another agent took its role's singleton (or its context's
// one slot) while a could not be accounted for. Such an agent is not
// brought back: its host stops it (seed 002: a replacement takes over a
// lease-renewed singleton only after the lease expired, and then there is
// one).
func (r *Registry) Superseded(ctx context.Context, tx store.Tx, a *kin.Agent) (bool, error) {
	prof, err := r.governorInTx(ctx, tx)
	if err != nil {
		return false, err
	}
	rule, ok := prof.Roles[a.Role]
	if !ok {
		return false, nil
	}
	name, err := kin.ParseName(a.Name)
	if err != nil {
		return false, nil
	}
	n, err := slotHolders(ctx, tx, rule.Cardinality, a.Role, name.Context, a.Host, a.ID)
	return n > 0, err
}

// sameGovernor reports whether two sets of settings hold the same
// governor.* ones, the settings that change the profile: the store keeps
// others (the fleet's log key and issuer), which another host may set
// after this one read them, and which need no new profile.
func sameGovernor(a, b map[string]string) bool {
	n := 0
	for k, v := range a {
		if !strings.HasPrefix(k, "governor.") {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	for k := range b {
		if strings.HasPrefix(k, "governor.") {
			n--
		}
	}
	return n == 0
}
