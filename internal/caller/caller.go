// Package caller says who sent a request to the daemon: the operator
// (whoever holds the operator socket or token) or an agent (a connection on
// its own socket, or the operator acting for it), carried in the request's
// context, and the checks every service makes with it.
//
// It must never decide more than who may act on whom: what an agent may do
// is the authority's.
package caller

import (
	"context"

	"github.com/kin-agents/kin/kin"
)

// Caller is who sent a request.
type Caller struct {
	Agent kin.AgentID // 0: the operator
	// Refused is set when a connection on an agent socket came from a
	// process outside that agent: every request on it is forbidden.
	Refused string
	// Peer is the host of the fleet that forwarded the request (package
	// peer), having checked its own caller: it is served as the operator
	// on the few routes a peer may call, and never forwarded again.
	Peer string
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// Of is the caller ctx carries: the operator when it carries none.
func Of(ctx context.Context) Caller {
	c, _ := ctx.Value(key{}).(Caller)
	return c
}

// Operator reports whether the caller is the operator.
func (c Caller) Operator() bool { return c.Agent == 0 && c.Refused == "" }

// CreatedBy is the created_by value for what the caller registers.
func (c Caller) CreatedBy() string {
	if c.Agent != 0 {
		return kin.AgentCreatedBy(c.Agent)
	}
	return kin.Operator
}

// Forbidden is the error for a refused caller, nil for any other.
func (c Caller) Forbidden() error {
	if c.Refused != "" {
		return kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	return nil
}

// OperatorOnly refuses agents: what names the act ("change the governor").
func OperatorOnly(ctx context.Context, what string) error {
	c := Of(ctx)
	if c.Operator() {
		return nil
	}
	if err := c.Forbidden(); err != nil {
		return err
	}
	return kin.Errorf(kin.ECodeForbidden, "only the operator may %s", what)
}

// MayActOn checks that the caller may act on target: the operator on
// anything, an agent on its own descendants (isDescendant(target, agent)),
// and on itself when self is allowed (reads, heartbeats, spawning its own
// children).
func MayActOn(ctx context.Context, target kin.AgentID, self bool, isDescendant func(id, ancestor kin.AgentID) bool) error {
	c := Of(ctx)
	switch {
	case c.Refused != "":
		return c.Forbidden()
	case c.Operator():
		return nil
	case target == c.Agent && self:
		return nil
	case target != 0 && isDescendant(target, c.Agent):
		return nil
	case target == c.Agent:
		return kin.Errorf(kin.ECodeForbidden, "agent %d may not do this to itself: only its parent or the operator may", c.Agent)
	}
	return kin.Errorf(kin.ECodeForbidden, "agent %d may act only on its own descendants, and %d is not one", c.Agent, target)
}
