package store

import "context"

// FleetSetting reads, in tx, a setting every host of a fleet must share
// (the log's key, the tokens' issuer) for host: the value recorded, and
// the fleet's other hosts (the hosts table's other names). With no other
// host the caller records its own value; with others the recorded one is
// the fleet's, and a host holding another is refused or follows it.
func FleetSetting(ctx context.Context, tx Tx, key, host string) (recorded string, others []string, err error) {
	settings, err := tx.SettingList(ctx)
	if err != nil {
		return "", nil, err
	}
	hosts, err := tx.HostList(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, h := range hosts {
		if h.Name != host {
			others = append(others, h.Name)
		}
	}
	return settings[key], others, nil
}
