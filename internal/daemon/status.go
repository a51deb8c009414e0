package daemon

import (
	"context"
	"errors"

	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Status describes the daemon.
func (d *Daemon) Status(ctx context.Context) (*kin.DaemonStatus, error) {
	n, err := d.store.AgentCount(ctx)
	if err != nil {
		return nil, d.storeError(err)
	}
	last, err := d.store.EventLastSeq(ctx)
	if err != nil {
		return nil, d.storeError(err)
	}
	return &kin.DaemonStatus{
		Containment:       d.Runner.Supervisor().Containment(),
		ContainmentReason: d.Runner.Supervisor().ContainmentReason(),
		CgroupRoot:        d.Runner.Supervisor().Root(),
		Sandbox:           d.Runner.DescribeContainment(),
		Missing:           d.Runner.MissingGuarantees(),
		Limits:            d.Runner.HostLimits(),
		AgentUIDRange:     d.Runner.UIDRangeString(),
		Running:           d.Runner.RunningCount(),
		Reconciling:       d.Runner.ReconcilingCount(),
		Version:           d.cfg.Version,
		PID:               d.pid,
		Home:              d.cfg.Home,
		Socket:            d.SocketPath(),
		HTTP:              d.HTTPAddr(),
		Store:             d.store.Driver(),
		Host:              d.host.Name(),
		Profile:           d.Registry.ProfileSource(),
		StartedAt:         d.started,
		Agents:            n,
		LastEvent:         last,
	}, nil
}

// storeError translates store failures into kin errors (store.KinError),
// logging the ones that are the store's own.
func (d *Daemon) storeError(err error) error {
	err = store.KinError(err)
	if kin.ErrorCodeOf(err) == kin.ECodeInternal && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		d.log.Error("store", "err", err)
	}
	return err
}
