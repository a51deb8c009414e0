package logsigner

import (
	"context"
	"fmt"
	"time"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// One log for the fleet (issue 24). Every host of a fleet appends to the
// store's one log; the fleet has one log key, so that a third party holding
// its public key alone verifies the whole fleet's history. The first host
// records the key's verifier in the store (setting log.verifier); a host
// whose own key differs is refused while the fleet has another host (a host
// alone may change its key: the setting follows it). Checkpoints are signed
// on schedule, and at a shutdown, by the one host that holds the
// "log-signer" lease (river's elector in the store); any host still signs
// a checkpoint asked for (kin log checkpoint), with the same key.

// settingLogVerifier is the store's setting holding the fleet's log key.
const settingLogVerifier = "log.verifier"

// signerLease is the singleton lease of the host that signs.
const signerLease = "log-signer"

// fleetKey records this host's log key as the fleet's, or refuses it when
// the fleet already has another.
func (sg *Signer) fleetKey(ctx context.Context, keyDir string) error {
	if sg.host == "" {
		return nil
	}
	ours := sg.key.VerifierKey()
	var refuse error
	err := sg.st.Update(ctx, func(tx store.Tx) error {
		refuse = nil
		fleet, others, err := store.FleetSetting(ctx, tx, settingLogVerifier, sg.host)
		if err != nil || fleet == ours {
			return err
		}
		if fleet != "" && len(others) > 0 {
			refuse = kin.Errorf(kin.ECodeConflict, "this host's log key (%s) is not the fleet's (%s, the key of hosts %v): "+
				"every host of a fleet signs one log with one key; copy %s from one of them (log.key and log.pub) into this host's home, "+
				"then start it again", ours, fleet, others, keyDir)
			return nil
		}
		return tx.SettingSet(ctx, settingLogVerifier, ours)
	})
	if err != nil {
		return fmt.Errorf("event log: record the fleet's log key: %w", err)
	}
	return refuse
}

// leader takes or renews the signer's lease and reports whether this host
// signs. A host alone (no fleet) always does.
func (sg *Signer) leader() bool {
	if sg.host == "" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := sg.now()
	var held bool
	err := sg.st.Update(ctx, func(tx store.Tx) error {
		var err error
		held, err = tx.LeaseTake(ctx, signerLease, sg.host, now, now.Add(3*sg.interval))
		return err
	})
	if err != nil {
		sg.log.Error("event log: the signer's lease", "err", err)
		return false
	}
	return held
}
