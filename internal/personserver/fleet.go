package personserver

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/identity"
	"github.com/kin-agents/kin/internal/keyring"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// One identity for the fleet (issue 24). Every host of a fleet signs agent
// and auth tokens with its own keys, whose private halves never leave its
// home; each host publishes the public halves in the store (signing_keys,
// at start and at each rotation) and every host verifies, and serves as its
// JWKS, the union: so a token any host signed verifies on every host, and a
// third party holding the fleet's JWKS (from any host) verifies it offline.
// The fleet has one issuer (the setting identity.issuer: --issuer, or the
// first host's own address), so that an agent's identifier, and a
// sub-agent's parent_agent, are the same whichever host issued the token.
// Revocation is the store's: a token is good while its agent is live and
// active in the store, which every host reads; what a host caches of it is
// dropped when the event log says the agent changed (Followed).

// settingIssuer is the store's setting holding the fleet's issuer.
const settingIssuer = "identity.issuer"

// reloadEvery bounds how often a token signed with a key this host has not
// seen makes it read the fleet's keys again.
const reloadEvery = time.Second

// fleetKeys is this host's copy of the fleet's published keys, by role.
type fleetKeys struct {
	mu     sync.RWMutex
	rows   map[string][]store.SigningKeyRow // by role: every host's, by created then kid
	loaded time.Time
}

// ring returns role's ring (the agent provider's unless role is the
// person server's).
func (srv *Server) ring(role string) *keyring.Ring {
	if role == kin.KeyRolePerson {
		return srv.id.person
	}
	return srv.id.ap
}

// keepOf is how long a role's replaced key stays published.
func keepOf(role string) time.Duration {
	if role == kin.KeyRolePerson {
		return identity.MaxAuthLifetime + time.Hour
	}
	return keyKeep
}

// publishKeys makes this host's ring of role its published keys in the
// store, and records aauth.keys.rotated when that changed them, so that
// the other hosts read them again: after a rotation always, at a start
// when the fleet has other hosts (a host alone tells nobody).
func (srv *Server) publishKeys(ctx context.Context, role string, rotated bool) error {
	if srv.cfg.Host == "" {
		return nil
	}
	ring := srv.ring(role)
	entries := ring.Entries()
	rows := make([]store.SigningKeyRow, 0, len(entries))
	for _, e := range entries {
		rows = append(rows, store.SigningKeyRow{KID: e.Key.KID, Host: srv.cfg.Host, Role: role,
			PublicKey: e.Key.Private.Public().(ed25519.PublicKey), CreatedAt: e.Created, RetiredAt: e.Retired})
	}
	err := store.UpdateAfter(ctx, srv.st, func(tx store.Tx, _ *store.AfterCommit) error {
		changed, err := tx.SigningKeyPublish(ctx, srv.cfg.Host, role, rows)
		if err != nil || !changed {
			return err
		}
		if !rotated {
			hosts, err := tx.HostList(ctx)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(hosts, func(h store.HostRow) bool { return h.Name != srv.cfg.Host }) {
				return nil
			}
		}
		return store.AppendEvent(ctx, tx, srv.now(), kin.EventKeysRotated, 0, 0,
			kin.KeysRotatedData{Role: role, KID: ring.Current().KID, Host: srv.cfg.Host})
	})
	if err != nil {
		return fmt.Errorf("publish the %s keys in the store: %w", role, err)
	}
	return srv.loadFleetKeys(ctx)
}

// loadFleetKeys reads the fleet's published keys.
func (srv *Server) loadFleetKeys(ctx context.Context) error {
	if srv.cfg.Host == "" {
		return nil
	}
	rows, err := srv.st.SigningKeyList(ctx)
	if err != nil {
		return fmt.Errorf("read the fleet's signing keys: %w", err)
	}
	by := map[string][]store.SigningKeyRow{}
	for _, r := range rows {
		by[r.Role] = append(by[r.Role], r)
	}
	srv.fleet.mu.Lock()
	srv.fleet.rows, srv.fleet.loaded = by, time.Now()
	srv.fleet.mu.Unlock()
	return nil
}

// published returns the keys of role this host serves and accepts: its own
// ring's, and every other host's published ones except those replaced
// longer ago than they can have signed a token still good; by creation,
// so the current keys come last and every host serves the same set.
func (srv *Server) published(role string) []store.SigningKeyRow {
	now := srv.now()
	var out []store.SigningKeyRow
	for _, e := range srv.ring(role).Entries() {
		out = append(out, store.SigningKeyRow{KID: e.Key.KID, Host: srv.cfg.Host, Role: role,
			PublicKey: e.Key.Private.Public().(ed25519.PublicKey), CreatedAt: e.Created, RetiredAt: e.Retired})
	}
	srv.fleet.mu.RLock()
	for _, r := range srv.fleet.rows[role] {
		if r.Host == srv.cfg.Host || (!r.RetiredAt.IsZero() && now.Sub(r.RetiredAt) > keepOf(role)) {
			continue
		}
		out = append(out, r)
	}
	srv.fleet.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.SigningKeyRow) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.KID, b.KID))
	})
	return out
}

// JWKS returns the published keys of role as a JWK Set.
func (srv *Server) JWKS(role string) identity.JWKS {
	rows := srv.published(role)
	set := identity.JWKS{Keys: make([]identity.JWK, 0, len(rows))}
	for _, r := range rows {
		set.Keys = append(set.Keys, identity.PublicJWK(r.PublicKey, r.KID))
	}
	return set
}

// publicKey returns the key of role published under kid by any host of
// the fleet. A kid this host has not seen makes it read the store again,
// at most once a reloadEvery (a host that just started may have signed it).
func (srv *Server) publicKey(ctx context.Context, role, kid string) (ed25519.PublicKey, error) {
	if k, err := srv.ring(role).Public(kid); err == nil {
		return k, nil
	}
	now := srv.now()
	find := func() ed25519.PublicKey {
		srv.fleet.mu.RLock()
		defer srv.fleet.mu.RUnlock()
		for _, r := range srv.fleet.rows[role] {
			if r.KID == kid && r.Host != srv.cfg.Host && (r.RetiredAt.IsZero() || now.Sub(r.RetiredAt) <= keepOf(role)) {
				return r.PublicKey
			}
		}
		return nil
	}
	if k := find(); k != nil {
		return k, nil
	}
	srv.fleet.mu.Lock()
	stale := srv.cfg.Host != "" && time.Since(srv.fleet.loaded) >= reloadEvery
	if stale {
		srv.fleet.loaded = time.Now() // this reload is the one of the next second
	}
	srv.fleet.mu.Unlock()
	if stale {
		if err := srv.loadFleetKeys(ctx); err != nil {
			srv.log.Error("identity: reload the fleet's keys", "err", err)
		} else if k := find(); k != nil {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no key %q", kid)
}

// fleetIssuer decides this host's issuer in the fleet: own (--issuer, or
// http://<its address>) when it is alone or first, else the fleet's. A
// host configured with another issuer than the fleet's is refused.
func (srv *Server) fleetIssuer(ctx context.Context, own string, configured bool) (string, error) {
	if srv.cfg.Host == "" {
		return own, nil
	}
	var out string
	var refuse error
	err := srv.st.Update(ctx, func(tx store.Tx) error {
		out, refuse = own, nil
		fleet, others, err := store.FleetSetting(ctx, tx, settingIssuer, srv.cfg.Host)
		if err != nil || fleet == own {
			return err
		}
		switch {
		case fleet != "" && len(others) > 0 && configured:
			refuse = kin.Errorf(kin.ECodeConflict, "this host's issuer %s is not the fleet's (%s, the issuer of hosts %v): "+
				"every host of a fleet issues tokens under one issuer; start it with --issuer %s, or without --issuer", own, fleet, others, fleet)
			return nil
		case fleet != "" && len(others) > 0:
			out = fleet
			return nil
		case own == "":
			return nil
		}
		return tx.SettingSet(ctx, settingIssuer, own)
	})
	if err != nil {
		return "", fmt.Errorf("identity: record the fleet's issuer: %w", err)
	}
	return out, refuse
}

// FollowedTypes are the events after which this host drops what it cached
// of the fleet: keys another host published, and agents whose status or
// state changed on any host (a revocation, an end, a cascade).
var FollowedTypes = []string{kin.EventKeysRotated, kin.EventAgentStatus, kin.EventAgentState, kin.EventAgentStop,
	kin.EventAgentExited, kin.EventAgentLost, kin.EventAgentFailed, kin.EventAgentReplaced, kin.EventChildCancel}

// Followed is handed each event of FollowedTypes committed to the store,
// by any host (the registry's FollowStore).
func (srv *Server) Followed(e kin.Event) {
	if e.Type == kin.EventKeysRotated {
		if err := srv.loadFleetKeys(context.Background()); err != nil {
			srv.log.Error("identity: reload the fleet's keys", "err", err)
		}
		return
	}
	srv.forgetAgent(e.Agent)
}
