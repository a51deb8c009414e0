package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Register adds an agent under the governor's rules, checked in the same
// transaction as the insert.
func (d *Daemon) Register(ctx context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	began := d.traceStart()
	a, err := d.register(ctx, req, nil)
	d.traceSpawn(ctx, spawnKindRegister, req.Parent, req.Name, a, began, err)
	return a, err
}

// spawnExtra is what a spawn stores beside the registration.
type spawnExtra struct {
	command  []string
	env      []string
	dir      string
	restart  kin.RestartPolicy
	grace    kin.Duration
	replaces kin.AgentID
	handoff  []byte // JSON of a validated kin.Handoff, or nil
}

// register validates, authorizes and inserts an agent (and its process spec
// for a spawn) with its events, the governor's rules checked in the same
// transaction, and adds it to the in-memory lineage once committed.
func (d *Daemon) register(ctx context.Context, req kin.RegisterRequest, extra *spawnExtra) (*kin.Agent, error) {
	c := callerOf(ctx)
	if c.refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
	if req.Parent == 0 && c.agent != 0 {
		req.Parent = c.agent // inside an agent, a spawn is a child of the caller
	}
	if req.Parent == 0 && req.Responsible == "" {
		req.Responsible = d.cfg.DefaultResponsible // the operator answers for a root nobody named
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Parent == 0 {
		if err := d.operatorOnly(ctx, "register root agents"); err != nil {
			return nil, err
		}
	} else if err := d.authorize(ctx, req.Parent, true); err != nil {
		return nil, err
	}
	name, _ := kin.ParseName(req.Name) // validated above
	if req.Life == "" {
		req.Life = kin.LifeOwned
	}
	mountIDs, err := d.checkPermissionRequest(&req)
	if err != nil {
		return nil, err
	}
	by := c.createdBy()
	var out *kin.Agent
	var refused *kin.Error
	var denied error
	var ad *admission
	err = d.store.Update(ctx, func(tx store.Tx) error {
		out, refused, denied, ad = nil, nil, nil, nil
		prof := d.governor()
		now := d.now()
		facts := governor.SpawnFacts{ParentID: req.Parent, Name: name, Life: req.Life, Now: now}
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
		var env []string
		if extra != nil {
			env = extra.env
		}
		if ad, denied = d.admit(&req, mountIDs, facts.Role, env, now); denied != nil {
			return nil
		}
		if extra != nil && ad.needsSandbox() {
			if denied = d.sandboxAvailable(); denied != nil {
				return nil
			}
		}
		a := kin.Agent{
			Stage:            req.Stage,
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
		ins := store.AgentInsertParams{Agent: a, NameContext: name.Context, Policy: ad.policy}
		if ad.own != nil {
			ins.DeadlineAt = ad.own.deadlineAt
		}
		if extra != nil {
			ins.Agent.Command, ins.Agent.Restart, ins.Agent.Grace, ins.Agent.Replaces = extra.command, extra.restart, extra.grace, extra.replaces
			ins.Env, ins.Dir, ins.Handoff = extra.env, extra.dir, extra.handoff
		}
		out, err = tx.AgentInsert(ctx, ins)
		if err != nil {
			return err
		}
		if err := d.checkAgentUID(out.ID); err != nil {
			return err // rolls the insert back
		}
		if err := appendEvent(ctx, tx, now, kin.EventAgentRegistered, out.ID, out.Parent, registeredData{
			Agent: out.ID, Name: out.Name, Role: out.Role, Creator: by, Responsible: out.Responsible,
			Parent: out.Parent, Generation: out.Generation, Life: out.Life, Replaces: out.Replaces,
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
	if refused != nil {
		d.metrics.countRejection(refused)
		return nil, refused
	}
	if denied != nil {
		d.metrics.countRejection(denied)
		return nil, denied
	}
	d.lineage.add(out.ID, out.Parent)
	d.metrics.countSpawn(extra)
	d.commit(out.ID, ad)
	if req.Template != nil {
		if err := d.provisionWorkspace(ctx, out, req.Template); err != nil {
			return out, err
		}
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
	if err := d.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	a, err := d.store.AgentGetByID(ctx, id)
	if err != nil {
		return nil, d.agentError(err, id)
	}
	return a, nil
}

// Agents lists agents.
func (d *Daemon) Agents(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error) {
	if c := callerOf(ctx); c.refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
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
	if c := callerOf(ctx); !c.operator() {
		// An agent sees itself and its descendants only.
		mine := out[:0]
		for _, a := range out {
			if d.authorize(ctx, a.ID, true) == nil {
				mine = append(mine, a)
			}
		}
		out = mine
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
	if err := d.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	out, err := d.store.AgentAncestors(ctx, id)
	if err != nil {
		return nil, d.agentError(err, id)
	}
	return out, nil
}

// Tree returns the subtree at id, or the whole forest for id 0. The shape
// comes from the in-memory lineage; the rows from the store.
func (d *Daemon) Tree(ctx context.Context, id kin.AgentID) ([]*kin.TreeNode, error) {
	if c := callerOf(ctx); id == 0 && c.agent != 0 {
		id = c.agent // an agent's forest is its own subtree
	}
	if err := d.authorize(ctx, id, true); id != 0 && err != nil {
		return nil, err
	}
	var agents []*kin.Agent
	var err error
	if id == 0 {
		if err := d.operatorOnly(ctx, "read the whole forest"); err != nil {
			return nil, err
		}
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
	trees := BuildTree(agents, id)
	var mark func(ns []*kin.TreeNode)
	mark = func(ns []*kin.TreeNode) {
		for _, n := range ns {
			n.Spend = d.spendOf(n.ID)
			mark(n.Children)
		}
	}
	mark(trees)
	return trees, nil
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

// SetStatus applies a status change. Suspending a running agent freezes its
// cgroup (its own processes, or with Cascade the whole subtree) and its
// state becomes suspended once the kernel reports it frozen; resuming thaws
// it. Terminating a running agent stops it first, cancelling its owned
// subtree. An agent may change only its descendants' status.
func (d *Daemon) SetStatus(ctx context.Context, req kin.StatusRequest) ([]*kin.Agent, error) {
	if !req.Action.Valid() {
		return nil, kin.Errorf(kin.ECodeInvalid, "action %q is not one of suspend, resume, revoke, terminate", req.Action)
	}
	if len(req.Reason) > kin.MaxScopeLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "reason is longer than %d bytes", kin.MaxScopeLen)
	}
	if err := d.authorize(ctx, req.ID, false); err != nil {
		return nil, err
	}
	by := callerOf(ctx).createdBy()
	before := map[kin.AgentID]kin.Status{}
	if req.Action == kin.ActionTerminate {
		ids := []kin.AgentID{req.ID}
		if req.Cascade {
			ids = d.lineage.subtree(req.ID)
		}
		as, err := d.store.AgentListByIDs(ctx, ids)
		if err != nil {
			return nil, d.storeError(err)
		}
		for _, a := range as {
			before[a.ID] = a.Status
			if !a.Running() || d.runtimeOf(a.ID) == nil {
				continue
			}
			if _, err := d.cancelTree(context.WithoutCancel(ctx), a.ID, reasonTerminated, nil, true, kin.StateTerminated); err != nil {
				return nil, err
			}
		}
	}
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
			from := a.Status
			if prev, wasStopped := before[a.ID]; wasStopped && a.Status == kin.StatusTerminated && prev != kin.StatusTerminated {
				to, ok, from = kin.StatusTerminated, true, prev // stopped above: record the status change too
			} else if !ok {
				continue // with --cascade, descendants already past the change are left alone
			}
			state := kin.State("")
			if to == kin.StatusTerminated && !a.State.Terminal() {
				state = kin.StateTerminated
			}
			if err := tx.AgentUpdateStatus(ctx, store.AgentUpdateStatusParams{ID: a.ID, Status: to, State: state, At: now}); err != nil {
				return err
			}
			data := statusData{Agent: a.ID, From: from, To: to, Action: req.Action, By: by, Reason: req.Reason}
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
			return nil
		}
		if req.Action != kin.ActionResume {
			ids := make([]kin.AgentID, len(changed))
			for i, a := range changed {
				ids[i] = a.ID
			}
			return d.revokeAgentsTx(ctx, tx, now, ids, "agent "+string(req.Action))
		}
		return nil
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	if refused != nil {
		return nil, refused
	}
	if req.Action == kin.ActionSuspend || req.Action == kin.ActionResume {
		if err := d.freezeChanged(ctx, req, changed); err != nil {
			return nil, err
		}
		ids := make([]kin.AgentID, len(changed))
		for i, a := range changed {
			ids[i] = a.ID
		}
		if changed, err = d.store.AgentListByIDs(ctx, ids); err != nil {
			return nil, d.storeError(err)
		}
	}
	return changed, nil
}

// freezeChanged freezes (or thaws) the processes of the agents whose status
// was just suspended (or resumed), then records their state: suspended only
// once the kernel says frozen.
func (d *Daemon) freezeChanged(ctx context.Context, req kin.StatusRequest, changed []*kin.Agent) error {
	var running []*kin.Agent
	for _, a := range changed {
		if a.Running() && d.runtimeOf(a.ID) != nil {
			running = append(running, a)
		}
	}
	if len(running) == 0 {
		return nil
	}
	freeze := req.Action == kin.ActionSuspend
	done := map[kin.AgentID]bool{}
	if req.Cascade && d.runtimeOf(req.ID) != nil {
		if err := d.freeze(ctx, req.ID, true, freeze); err != nil {
			return kin.Errorf(kin.ECodeInternal, "%s agent %d's cgroup: %v", map[bool]string{true: "freeze", false: "thaw"}[freeze], req.ID, err)
		}
		for _, a := range running {
			done[a.ID] = true
		}
	}
	for _, a := range running {
		if done[a.ID] {
			continue
		}
		if err := d.freeze(ctx, a.ID, false, freeze); err != nil {
			return kin.Errorf(kin.ECodeInternal, "%s agent %d: %v", map[bool]string{true: "freeze", false: "thaw"}[freeze], a.ID, err)
		}
	}
	now := d.now()
	err := d.store.Update(ctx, func(tx store.Tx) error {
		for _, a := range running {
			cur, err := tx.AgentGetByID(ctx, a.ID)
			if err != nil {
				return err
			}
			if cur.State.Terminal() || cur.State == kin.StateStopping {
				continue
			}
			p := store.AgentUpdateParams{ID: a.ID, At: now}
			to := kin.StateSuspended
			if !freeze {
				to = kin.StateRegistered
				if !cur.LastHeartbeat.IsZero() {
					// It could not heartbeat while frozen: a fresh window.
					to = kin.StateActive
					p.LastHeartbeat = &now
				}
			}
			if to == cur.State {
				continue
			}
			p.State = &to
			if err := tx.AgentUpdate(ctx, p); err != nil {
				return err
			}
			if err := appendEvent(ctx, tx, now, kin.EventAgentState, a.ID, a.Parent, stateData{Agent: a.ID, From: cur.State, To: to}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return d.storeError(err)
	}
	return nil
}

// Events returns stored events.
func (d *Daemon) Events(ctx context.Context, f kin.EventFilter) ([]kin.Event, error) {
	if err := d.eventFilterFor(ctx, &f); err != nil {
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
	if err := d.eventFilterFor(ctx, &f); err != nil {
		return err
	}
	if f.Before != 0 {
		return kin.Errorf(kin.ECodeInvalid, "before reads history backwards; it cannot be followed")
	}
	const page = 1000
	remaining := f.Limit
	for {
		wake := d.store.Wait()
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

// eventFilterFor validates f and narrows it for an agent caller to events
// about itself or one of its descendants.
func (d *Daemon) eventFilterFor(ctx context.Context, f *kin.EventFilter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if c := callerOf(ctx); !c.operator() && f.Agent == 0 {
		f.Agent = c.agent
	}
	if f.Agent != 0 {
		return d.authorize(ctx, f.Agent, true)
	}
	return nil
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
	if err := d.operatorOnly(ctx, "change the governor"); err != nil {
		return nil, err
	}
	reset := value == kin.GovernorReset
	if reset {
		// Back to the profile's own value; the override is forgotten.
		if !slices.Contains(kin.GovernorSettings, key) {
			return nil, kin.Errorf(kin.ECodeInvalid, "unknown governor setting %q (keys: %s)", key, strings.Join(kin.GovernorSettings, ", "))
		}
		value = strconv.Itoa(settingValue(d.baseProfile, key))
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "governor setting %s needs a whole number (or %q), not %q", key, kin.GovernorReset, value)
	}
	probe := d.governor()
	if err := governor.SetSetting(&probe, key, n); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "%v", err)
	}
	by := callerOf(ctx).createdBy()
	err = d.store.Update(ctx, func(tx store.Tx) error {
		d.mu.Lock()
		from := d.profile
		to := from
		governor.SetSetting(&to, key, n) // checked above
		d.profile = to
		stored := value
		if reset {
			delete(d.overrides, key)
			stored = "" // an empty setting is no override (loadGovernor)
		} else {
			d.overrides[key] = value
		}
		d.mu.Unlock()
		if err := tx.SettingSet(ctx, "governor."+key, stored); err != nil {
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
		Containment:       d.sup.Containment(),
		ContainmentReason: d.sup.ContainmentReason(),
		CgroupRoot:        d.sup.Root(),
		Sandbox:           d.describeContainment(),
		Missing:           d.missingGuarantees(),
		AgentUIDRange:     d.uidRangeString(),
		Running:           d.runningCount(),
		Version:           d.cfg.Version,
		PID:               d.pid,
		Home:              d.cfg.Home,
		Socket:            d.SocketPath(),
		HTTP:              d.HTTPAddr(),
		Store:             d.store.Driver(),
		Profile:           d.profileSource,
		StartedAt:         d.started,
		Agents:            n,
		LastEvent:         last,
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
	Replaces    kin.AgentID `json:"replaces,omitempty"`
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
