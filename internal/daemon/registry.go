package daemon

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// caller is who is acting. Everything reaching the daemon today comes from
// the operator (the socket or the operator token); per-agent callers arrive
// with the supervisor's per-agent sockets.
func createdBy(ctx context.Context) string { return kin.Operator }

// Register adds an agent under the governor's rules, checked in the same
// transaction as the insert.
func (d *Daemon) Register(ctx context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	name, _ := kin.ParseName(req.Name) // validated above
	if req.Life == "" {
		req.Life = kin.LifeOwned
	}
	by := createdBy(ctx)
	var out *kin.Agent
	var refused *kin.Error
	err := d.store.Update(ctx, func(tx store.Tx) error {
		out, refused = nil, nil
		prof := d.governor()
		now := d.now()
		facts := governor.SpawnFacts{ParentID: req.Parent, Name: name, Now: now}
		if req.Parent != 0 {
			p, err := tx.AgentGetByID(ctx, req.Parent)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			facts.Parent = p
		}
		facts.Role = governor.Role(prof, req.Role, name)
		needs := governor.NeedsFor(prof, facts.Role, facts.Parent != nil)
		var err error
		if needs.LiveChildren {
			if facts.LiveChildren, err = tx.AgentCountLive(ctx, store.AgentCountLiveParams{Parent: req.Parent, HasParent: true}); err != nil {
				return err
			}
		}
		switch needs.Cardinality {
		case kin.CardinalitySingleton:
			facts.LiveSameRole, err = tx.AgentCountLive(ctx, store.AgentCountLiveParams{Role: facts.Role})
		case kin.CardinalityPerContext:
			facts.LiveSameRole, err = tx.AgentCountLive(ctx, store.AgentCountLiveParams{Role: facts.Role, NameContext: &name.Context})
		}
		if err != nil {
			return err
		}
		if req.Wallet != "" {
			if facts.WalletTaken, err = tx.AgentWalletExists(ctx, req.Wallet); err != nil {
				return err
			}
		}
		if refused = governor.CheckSpawn(prof, facts); refused != nil {
			if governor.IsRuleCode(refused.Code) {
				return d.recordRejection(ctx, tx, prof, req, facts, refused, by)
			}
			return nil
		}
		if _, err := tx.AgentLiveByName(ctx, req.Name); err == nil {
			refused = kin.Errorf(kin.ECodeConflict, "name %q is taken by a live agent (names are unique among agents that are not terminated)", req.Name)
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		a := kin.Agent{
			Name:             req.Name,
			Role:             facts.Role,
			Parent:           req.Parent,
			Generation:       facts.Generation(),
			Responsible:      req.Responsible,
			Wallet:           req.Wallet,
			ConstitutionHash: req.ConstitutionHash,
			CapabilityHash:   req.CapabilityHash,
			Scope:            req.Scope,
			SelfModifying:    req.SelfModifying,
			Life:             req.Life,
			Status:           kin.StatusActive,
			State:            kin.StateRegistered,
			CreatedAt:        now,
			CreatedBy:        by,
			UpdatedAt:        now,
		}
		if a.Responsible == "" && facts.Parent != nil {
			a.Responsible = facts.Parent.Responsible // seed 000: children inherit by default
		}
		out, err = tx.AgentInsert(ctx, store.AgentInsertParams{Agent: a, NameContext: name.Context})
		if err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, now, kin.EventAgentRegistered, out.ID, out.Parent, registeredData{
			Agent: out.ID, Name: out.Name, Role: out.Role, Creator: by, Responsible: out.Responsible,
			Parent: out.Parent, Generation: out.Generation, Life: out.Life,
		}); err != nil {
			return err
		}
		if out.Parent != 0 {
			return appendEvent(ctx, tx, now, kin.EventChildSpawned, out.ID, out.Parent, childSpawnedData{
				Parent: out.Parent, Child: out.ID, Generation: out.Generation,
			})
		}
		return nil
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	if out != nil {
		d.lineage.add(out.ID, out.Parent)
	}
	d.hub.notify()
	if refused != nil {
		return nil, refused
	}
	return out, nil
}

// recordRejection writes seed 002's alert to the parent and runs the circuit
// breaker, in the rejected request's own transaction.
func (d *Daemon) recordRejection(ctx context.Context, tx store.Tx, prof kin.Profile, req kin.RegisterRequest, f governor.SpawnFacts, refused *kin.Error, by string) error {
	now := f.Now
	if err := appendEvent(ctx, tx, now, kin.EventSpawnRejected, 0, req.Parent, spawnRejectedData{
		Parent: req.Parent, Name: req.Name, Role: f.Role, Generation: f.Generation(),
		Code: refused.Code, Message: refused.Message, By: by,
	}); err != nil {
		return err
	}
	if f.Parent == nil {
		return nil // nobody to alert or to throttle
	}
	counted := governor.CountsForBreaker(refused.Code)
	if err := tx.SpawnRejectionInsert(ctx, store.SpawnRejectionInsertParams{Parent: req.Parent, At: now, Counted: counted}); err != nil {
		return err
	}
	cb := prof.CircuitBreaker
	if !counted || cb.MaxRejections <= 0 {
		return nil
	}
	recent, err := tx.SpawnRejectionCount(ctx, req.Parent, now.Add(-time.Duration(cb.Window)))
	if err != nil {
		return err
	}
	until, trip := governor.Trip(prof, recent, now)
	if !trip {
		return nil
	}
	if err := tx.AgentUpdateSpawnBlock(ctx, req.Parent, until); err != nil {
		return err
	}
	return appendEvent(ctx, tx, now, kin.EventCircuitOpen, req.Parent, 0, circuitOpenData{
		Agent: req.Parent, Rejections: recent, Window: cb.Window, Until: until,
	})
}

// Agent returns one agent.
func (d *Daemon) Agent(ctx context.Context, id kin.AgentID) (*kin.Agent, error) {
	a, err := d.store.AgentGetByID(ctx, id)
	if err != nil {
		return nil, d.agentError(err, id)
	}
	return a, nil
}

// Agents lists agents.
func (d *Daemon) Agents(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error) {
	if f.Status != "" && !f.Status.Valid() {
		return nil, kin.Errorf(kin.ECodeInvalid, "status %q is not one of active, suspended, revoked, terminated", f.Status)
	}
	if f.State != "" && !f.State.Valid() {
		return nil, kin.Errorf(kin.ECodeInvalid, "state %q is not a state (%s)", f.State, kin.StateList())
	}
	if f.Limit < 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "limit %d is negative", f.Limit)
	}
	out, err := d.store.AgentList(ctx, f)
	if err != nil {
		return nil, d.storeError(err)
	}
	return nonNil(out), nil
}

// Children lists an agent's direct children.
func (d *Daemon) Children(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	if _, err := d.Agent(ctx, id); err != nil {
		return nil, err
	}
	return d.Agents(ctx, kin.AgentFilter{Parent: id, HasParent: true})
}

// Ancestors returns the responsibility chain, the agent first.
func (d *Daemon) Ancestors(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	out, err := d.store.AgentAncestors(ctx, id)
	if err != nil {
		return nil, d.agentError(err, id)
	}
	return out, nil
}

// Tree returns the subtree at id, or the whole forest for id 0. The shape
// comes from the in-memory lineage; the rows from the store.
func (d *Daemon) Tree(ctx context.Context, id kin.AgentID) ([]*kin.TreeNode, error) {
	var agents []*kin.Agent
	var err error
	if id == 0 {
		agents, err = d.store.AgentList(ctx, kin.AgentFilter{})
	} else {
		ids := d.lineage.subtree(id)
		if ids == nil {
			return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
		}
		agents, err = d.store.AgentListByIDs(ctx, ids)
	}
	if err != nil {
		return nil, d.agentError(err, id)
	}
	return BuildTree(agents, id), nil
}

// BuildTree nests agents (each parent listed before its children) into
// trees. With root 0 every agent whose parent is not in the list is a root.
func BuildTree(agents []*kin.Agent, root kin.AgentID) []*kin.TreeNode {
	nodes := make(map[kin.AgentID]*kin.TreeNode, len(agents))
	roots := []*kin.TreeNode{}
	for _, a := range agents {
		n := &kin.TreeNode{Agent: *a, Children: []*kin.TreeNode{}}
		nodes[a.ID] = n
		if p, ok := nodes[a.Parent]; ok && a.ID != root {
			p.Children = append(p.Children, n)
		} else {
			roots = append(roots, n)
		}
	}
	return roots
}

// SetStatus applies an operator's status change.
func (d *Daemon) SetStatus(ctx context.Context, req kin.StatusRequest) ([]*kin.Agent, error) {
	if !req.Action.Valid() {
		return nil, kin.Errorf(kin.ECodeInvalid, "action %q is not one of suspend, resume, revoke, terminate", req.Action)
	}
	if len(req.Reason) > kin.MaxScopeLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "reason is longer than %d bytes", kin.MaxScopeLen)
	}
	by := createdBy(ctx)
	var changed []*kin.Agent
	var refused *kin.Error
	err := d.store.Update(ctx, func(tx store.Tx) error {
		changed, refused = nil, nil
		now := d.now()
		var targets []*kin.Agent
		var err error
		if req.Cascade {
			targets, err = tx.AgentSubtree(ctx, req.ID)
		} else {
			var a *kin.Agent
			a, err = tx.AgentGetByID(ctx, req.ID)
			targets = []*kin.Agent{a}
		}
		if errors.Is(err, store.ErrNotFound) {
			refused = kin.Errorf(kin.ECodeNotFound, "agent %d not found", req.ID)
			return nil
		}
		if err != nil {
			return err
		}
		for _, a := range targets {
			to, ok := req.Action.Transition(a.Status)
			if !ok {
				continue // with --cascade, descendants already past the change are left alone
			}
			state := kin.State("")
			if to == kin.StatusTerminated {
				state = kin.StateTerminated
			}
			if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: a.ID, Status: to, State: state, At: now}); err != nil {
				return err
			}
			data := statusData{Agent: a.ID, From: a.Status, To: to, Action: req.Action, By: by, Reason: req.Reason}
			if req.Cascade && a.ID != req.ID {
				data.CascadeFrom = req.ID
			}
			if err := appendEvent(ctx, tx, now, kin.EventAgentStatus, a.ID, a.Parent, data); err != nil {
				return err
			}
			a.Status, a.UpdatedAt = to, now
			if state != "" {
				a.State = state
			}
			changed = append(changed, a)
		}
		if len(changed) == 0 {
			refused = kin.Errorf(kin.ECodeInvalidTransition, "agent %d is %s: cannot %s it", req.ID, targets[0].Status, req.Action)
		}
		return nil
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	if refused != nil {
		return nil, refused
	}
	d.hub.notify()
	return changed, nil
}

// Events returns stored events.
func (d *Daemon) Events(ctx context.Context, f kin.EventFilter) ([]kin.Event, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	out, err := d.store.EventList(ctx, f)
	if err != nil {
		return nil, d.storeError(err)
	}
	if out == nil {
		out = []kin.Event{}
	}
	return out, nil
}

// FollowEvents streams events from f.Since on, live, until ctx ends, fn
// fails or the daemon closes.
func (d *Daemon) FollowEvents(ctx context.Context, f kin.EventFilter, fn func(kin.Event) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	const page = 1000
	remaining := f.Limit
	for {
		wake := d.hub.wait()
		q := f
		q.Limit = page
		if remaining > 0 && remaining < page {
			q.Limit = remaining
		}
		evs, err := d.store.EventList(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return d.storeError(err)
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return err
			}
			f.Since = e.Seq
		}
		if f.Limit > 0 {
			if remaining -= len(evs); remaining <= 0 {
				return nil
			}
		}
		if len(evs) == q.Limit {
			continue // more are stored: read on before waiting
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.closing:
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		}
	}
}

// Governor returns the rules in force.
func (d *Daemon) Governor(ctx context.Context) (*kin.GovernorInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	info := &kin.GovernorInfo{Profile: d.profile, Source: d.profileSource, Overrides: map[string]string{}}
	for k, v := range d.overrides {
		info.Overrides[k] = v
	}
	return info, nil
}

// SetGovernor changes a governor setting and records it as an event. The
// change persists across restarts (it is kept in the store).
func (d *Daemon) SetGovernor(ctx context.Context, key, value string) (*kin.GovernorInfo, error) {
	n, err := strconv.Atoi(value)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "governor setting %s needs a whole number, not %q", key, value)
	}
	probe := d.governor()
	if err := governor.SetSetting(&probe, key, n); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "%v", err)
	}
	by := createdBy(ctx)
	err = d.store.Update(ctx, func(tx store.Tx) error {
		d.mu.Lock()
		from := d.profile
		to := from
		governor.SetSetting(&to, key, n) // checked above
		d.profile = to
		d.overrides[key] = value
		d.mu.Unlock()
		if err := tx.SettingSet(ctx, "governor."+key, value); err != nil {
			return err
		}
		return appendEvent(ctx, tx, d.now(), kin.EventGovernorChanged, 0, 0, governorChangedData{
			Key: key, From: settingValue(from, key), To: n, By: by,
		})
	})
	if err != nil {
		// The in-memory change may be ahead of the store: reload from it.
		if rerr := d.loadGovernor(context.WithoutCancel(ctx)); rerr != nil {
			d.log.Error("reload governor settings", "err", rerr)
		}
		return nil, d.storeError(err)
	}
	d.hub.notify()
	return d.Governor(ctx)
}

func settingValue(p kin.Profile, key string) int {
	if key == "max_children" {
		return p.MaxChildren
	}
	return p.MaxGenerationDepth
}

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
		Version:   d.cfg.Version,
		PID:       d.pid,
		Home:      d.cfg.Home,
		Socket:    d.SocketPath(),
		HTTP:      d.HTTPAddr(),
		Store:     d.store.Driver(),
		Profile:   d.profileSource,
		StartedAt: d.started,
		Agents:    n,
		LastEvent: last,
	}, nil
}

func (d *Daemon) agentError(err error, id kin.AgentID) error {
	if errors.Is(err, store.ErrNotFound) {
		return kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return d.storeError(err)
}

// storeError translates store failures into kin errors, once.
func (d *Daemon) storeError(err error) error {
	var ke *kin.Error
	switch {
	case errors.As(err, &ke):
		return ke
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, store.ErrNameTaken):
		return kin.Errorf(kin.ECodeConflict, "the name is taken by a live agent")
	case errors.Is(err, store.ErrWalletTaken):
		return &kin.Error{Code: kin.ECodeWalletTaken, Message: governor.MsgWalletTaken}
	case errors.Is(err, store.ErrNotFound):
		return kin.Errorf(kin.ECodeNotFound, "not found")
	case errors.Is(err, store.ErrClosed):
		return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
	}
	d.log.Error("store", "err", err)
	return fmt.Errorf("store: %w", err)
}

func nonNil(a []*kin.Agent) []*kin.Agent {
	if a == nil {
		return []*kin.Agent{}
	}
	return a
}

func appendEvent(ctx context.Context, tx store.Tx, at time.Time, typ string, agent, parent kin.AgentID, data any) error {
	e, err := kin.NewEvent(typ, agent, parent, data)
	if err != nil {
		return err
	}
	e.Time = at
	_, err = tx.EventAppend(ctx, e)
	return err
}

// Event payloads: the fields each event type carries.
type registeredData struct {
	Agent       kin.AgentID `json:"agent"`
	Name        string      `json:"name"`
	Role        string      `json:"role"`
	Creator     string      `json:"creator"`
	Responsible string      `json:"responsible"`
	Parent      kin.AgentID `json:"parent"`
	Generation  int         `json:"generation"`
	Life        kin.Life    `json:"life"`
}

type childSpawnedData struct {
	Parent     kin.AgentID `json:"parent"`
	Child      kin.AgentID `json:"child"`
	Generation int         `json:"generation"`
}

type statusData struct {
	Agent       kin.AgentID      `json:"agent"`
	From        kin.Status       `json:"from"`
	To          kin.Status       `json:"to"`
	Action      kin.StatusAction `json:"action"`
	By          string           `json:"by"`
	Reason      string           `json:"reason,omitempty"`
	CascadeFrom kin.AgentID      `json:"cascade_from,omitempty"`
}

type spawnRejectedData struct {
	Parent     kin.AgentID   `json:"parent"`
	Name       string        `json:"name"`
	Role       string        `json:"role,omitempty"`
	Generation int           `json:"generation"`
	Code       kin.ErrorCode `json:"code"`
	Message    string        `json:"message"`
	By         string        `json:"by"`
}

type circuitOpenData struct {
	Agent      kin.AgentID  `json:"agent"`
	Rejections int          `json:"rejections"`
	Window     kin.Duration `json:"window"`
	Until      time.Time    `json:"until"`
}

type governorChangedData struct {
	Key  string `json:"key"`
	From int    `json:"from"`
	To   int    `json:"to"`
	By   string `json:"by"`
}
