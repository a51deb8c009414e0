package sqlstore

import (
	"context"
	"time"

	"github.com/kin-agents/kin/internal/store"
)

// The fleet's hosts: one row per host name, with the lease of the daemon
// (named by its home's id) that holds it.

func (r reader) HostList(ctx context.Context) ([]store.HostRow, error) {
	rows, err := r.query(ctx, `SELECT h.name, h.home, h.address, h.containment, h.version, h.started_at, h.renewed_at, h.lease_until,
		(SELECT COUNT(*) FROM agents a WHERE a.host = h.name AND `+liveSQLOf("a.")+`)
		FROM hosts h ORDER BY h.name`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.HostRow
	for rows.Next() {
		var h store.HostRow
		var started, renewed, until int64
		if err := rows.Scan(&h.Name, &h.Home, &h.Address, &h.Containment, &h.Version, &started, &renewed, &until, &h.Agents); err != nil {
			return nil, interpretError(err)
		}
		h.StartedAt, h.RenewedAt, h.LeaseUntil = unixTime(started), unixTime(renewed), unixTime(until)
		out = append(out, h)
	}
	return out, interpretError(rows.Err())
}

func (t *txn) HostClaim(ctx context.Context, h store.HostRow) error {
	var home string
	var until int64
	err := t.queryRow(ctx, `SELECT home, lease_until FROM hosts WHERE name = ?`, h.Name).Scan(&home, &until)
	switch err = interpretError(err); {
	case err == store.ErrNotFound:
	case err != nil:
		return err
	case home != h.Home && until > h.RenewedAt.UnixNano():
		return store.ErrHostTaken
	}
	_, err = t.exec(ctx, `INSERT INTO hosts (name, home, address, containment, version, started_at, renewed_at, lease_until)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET home = excluded.home, address = excluded.address, containment = excluded.containment,
			version = excluded.version, started_at = excluded.started_at, renewed_at = excluded.renewed_at, lease_until = excluded.lease_until`,
		h.Name, h.Home, h.Address, h.Containment, h.Version, nanos(h.StartedAt), nanos(h.RenewedAt), nanos(h.LeaseUntil))
	return interpretError(err)
}

func (t *txn) HostRenew(ctx context.Context, name, home string, renewed, until time.Time) error {
	res, err := t.exec(ctx, `UPDATE hosts SET renewed_at = ?, lease_until = ? WHERE name = ? AND home = ?`,
		nanos(renewed), nanos(until), name, home)
	return affectedOne(res, err)
}

func (t *txn) HostRelease(ctx context.Context, name, home string) error {
	_, err := t.exec(ctx, `UPDATE hosts SET lease_until = 0 WHERE name = ? AND home = ?`, name, home)
	return interpretError(err)
}

// Singleton leases (river's elector in the store): one row per name, held
// by one holder until a time.

func (t *txn) LeaseTake(ctx context.Context, name, holder string, now, until time.Time) (bool, error) {
	var cur string
	var end int64
	err := t.queryRow(ctx, `SELECT holder, until FROM leases WHERE name = ?`, name).Scan(&cur, &end)
	switch err = interpretError(err); {
	case err == store.ErrNotFound:
	case err != nil:
		return false, err
	case cur != holder && end > now.UnixNano():
		return false, nil
	}
	_, err = t.exec(ctx, `INSERT INTO leases (name, holder, until) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until`, name, holder, nanos(until))
	return err == nil, interpretError(err)
}

func (t *txn) LeaseRelease(ctx context.Context, name, holder string) error {
	_, err := t.exec(ctx, `UPDATE leases SET until = 0 WHERE name = ? AND holder = ?`, name, holder)
	return interpretError(err)
}

// The fleet's signing keys: the public half of every host's keys, each
// host publishing its own (one identity for the fleet).

func (r reader) SigningKeyList(ctx context.Context) ([]store.SigningKeyRow, error) {
	rows, err := r.query(ctx, `SELECT kid, host, role, public_key, created_at, retired_at FROM signing_keys ORDER BY role, kid`)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.SigningKeyRow
	for rows.Next() {
		var k store.SigningKeyRow
		var created, retired int64
		if err := rows.Scan(&k.KID, &k.Host, &k.Role, &k.PublicKey, &created, &retired); err != nil {
			return nil, interpretError(err)
		}
		k.CreatedAt, k.RetiredAt = unixTime(created), unixTime(retired)
		out = append(out, k)
	}
	return out, interpretError(rows.Err())
}

func (t *txn) SigningKeyPublish(ctx context.Context, host, role string, keys []store.SigningKeyRow) (bool, error) {
	rows, err := t.query(ctx, `SELECT kid, retired_at FROM signing_keys WHERE host = ? AND role = ?`, host, role)
	if err != nil {
		return false, interpretError(err)
	}
	had := map[string]int64{}
	for rows.Next() {
		var kid string
		var retired int64
		if err := rows.Scan(&kid, &retired); err != nil {
			rows.Close()
			return false, interpretError(err)
		}
		had[kid] = retired
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, interpretError(err)
	}
	changed := false
	keep := map[string]bool{}
	for _, k := range keys {
		keep[k.KID] = true
		retired, ok := had[k.KID]
		if ok && retired == nanos(k.RetiredAt) {
			continue
		}
		changed = true
		_, err := t.exec(ctx, `INSERT INTO signing_keys (kid, host, role, public_key, created_at, retired_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (kid) DO UPDATE SET retired_at = excluded.retired_at WHERE signing_keys.host = excluded.host`,
			k.KID, host, role, k.PublicKey, nanos(k.CreatedAt), nanos(k.RetiredAt))
		if err != nil {
			return false, interpretError(err)
		}
	}
	for kid := range had {
		if keep[kid] {
			continue
		}
		changed = true
		if _, err := t.exec(ctx, `DELETE FROM signing_keys WHERE kid = ? AND host = ?`, kid, host); err != nil {
			return false, interpretError(err)
		}
	}
	return changed, nil
}
