package daemon

import (
	"context"

	"github.com/kin-agents/kin/kin"
)

// caller is who sent a request: the operator (whoever holds the operator
// socket or token) or an agent (a connection on its own socket, or on the
// operator socket from a process in its cgroup).
type caller struct {
	agent kin.AgentID // 0: the operator
	// refused is set when a connection on an agent socket came from a
	// process outside that agent: every request on it is forbidden.
	refused string
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

func (c caller) operator() bool { return c.agent == 0 && c.refused == "" }

// createdBy is the created_by value for what the caller registers.
func (c caller) createdBy() string {
	if c.agent != 0 {
		return kin.AgentCreatedBy(c.agent)
	}
	return kin.Operator
}

// authorize checks that the caller may act on target: the operator on
// anything, an agent on its own descendants, and on itself when self is
// allowed (reads, heartbeats, spawning its own children).
func (d *Daemon) authorize(ctx context.Context, target kin.AgentID, self bool) error {
	c := callerOf(ctx)
	switch {
	case c.refused != "":
		return kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	case c.operator():
		return nil
	case target == c.agent && self:
		return nil
	case target != 0 && d.lineage.isDescendant(target, c.agent):
		return nil
	case target == c.agent:
		return kin.Errorf(kin.ECodeForbidden, "agent %d may not do this to itself: only its parent or the operator may", c.agent)
	}
	return kin.Errorf(kin.ECodeForbidden, "agent %d may act only on its own descendants, and %d is not one", c.agent, target)
}

// operatorOnly refuses agents.
func (d *Daemon) operatorOnly(ctx context.Context, what string) error {
	c := callerOf(ctx)
	if c.operator() {
		return nil
	}
	if c.refused != "" {
		return kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
	return kin.Errorf(kin.ECodeForbidden, "only the operator may %s", what)
}

// Whoami returns the calling agent, nil for the operator.
func (d *Daemon) Whoami(ctx context.Context) (*kin.Agent, error) {
	c := callerOf(ctx)
	if c.refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
	if c.agent == 0 {
		return nil, nil
	}
	return d.Agent(ctx, c.agent)
}

// actAs is httpapi.Server.ActAs: the operator acting for one of its agents
// (kin.HeaderActAs: an id, or a live agent's name, as agentByRef reads it),
// answered from then on as that agent would be. The agent must exist and
// not have ended.
func (d *Daemon) actAs(ctx context.Context, value string) (context.Context, error) {
	if c := callerOf(ctx); !c.operator() {
		if c.refused != "" {
			return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
		}
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not send %s: only the operator may act for another agent", c.agent, kin.HeaderActAs)
	}
	a, err := d.agentByRef(ctx, value)
	if err != nil {
		return nil, kin.Errorf(kin.ErrorCodeOf(err), "%s: %s", kin.HeaderActAs, kin.ErrorMessageOf(err))
	}
	if !a.Live() {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s: agent %d (%s) is %s (%s): nobody acts for it any more", kin.HeaderActAs, a.ID, a.Name, a.Status, a.State)
	}
	return withCaller(ctx, caller{agent: a.ID}), nil
}
