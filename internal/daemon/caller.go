package daemon

import (
	"context"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/kin"
)

// actAs is httpapi.Server.ActAs: the operator acting for one of its agents
// (kin.HeaderActAs: an id, or a live agent's name, as agentByRef reads it),
// answered from then on as that agent would be. The agent must exist and
// not have ended.
func (d *Daemon) actAs(ctx context.Context, value string) (context.Context, error) {
	if c := caller.Of(ctx); !c.Operator() {
		if c.Refused != "" {
			return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
		}
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not send %s: only the operator may act for another agent", c.Agent, kin.HeaderActAs)
	}
	a, err := d.Registry.AgentByRef(ctx, value)
	if err != nil {
		return nil, kin.Errorf(kin.ErrorCodeOf(err), "%s: %s", kin.HeaderActAs, kin.ErrorMessageOf(err))
	}
	if !a.Live() {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s: agent %d (%s) is %s (%s): nobody acts for it any more", kin.HeaderActAs, a.ID, a.Name, a.Status, a.State)
	}
	return caller.With(ctx, caller.Caller{Agent: a.ID}), nil
}
