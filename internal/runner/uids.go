package runner

import (
	"github.com/kin-agents/kin/internal/uidrange"
	"github.com/kin-agents/kin/kin"
)

// allocateUIDs settles the home's agent uid range (with the home locked,
// so the range recorded in it is this daemon's): the one the home
// recorded, the one Config.UIDRange asks for, or a free one, and never one
// another daemon of the host or a user or group of it has.
func (run *Runner) allocateUIDs() error {
	if !run.cfg.AgentUIDs {
		return nil
	}
	var want *uidrange.Range
	if run.cfg.UIDRange != "" {
		r, err := uidrange.Parse(run.cfg.UIDRange)
		if err != nil {
			return err
		}
		want = &r
	}
	got, err := uidrange.Allocator{Dir: run.cfg.UIDRangeDir}.Allocate(run.cfg.Home, want)
	if err != nil {
		return err
	}
	for _, e := range got.Reclaimed {
		run.log.Info("uid range reclaimed: its home no longer records it", "range", e.Range.String(), "home", e.Home)
	}
	if got.New {
		run.log.Info("uid range allocated", "range", got.Range.String(), "uids", got.Range.Span())
	}
	run.uids = &got.Range
	return nil
}

// uidRangeString is the agents' uid range for the start-up line and
// Status, "" when agents run as the daemon's user.
func (run *Runner) uidRangeString() string {
	if run.uids == nil {
		return ""
	}
	return run.uids.String()
}

// checkAgentUID refuses an agent id past the home's uid range: it must not
// wrap into another daemon's or user's uid.
func (run *Runner) checkAgentUID(id kin.AgentID) error {
	if run.uids == nil {
		return nil
	}
	if _, err := run.uids.UID(uint64(id)); err != nil {
		return kin.Errorf(kin.ECodeUnavailable, "%v", err)
	}
	return nil
}

// AgentUIDRange is the home's agent uid range, or nil when agents run as
// the daemon's user.
func (run *Runner) AgentUIDRange() *uidrange.Range {
	if run.uids == nil {
		return nil
	}
	r := *run.uids
	return &r
}
