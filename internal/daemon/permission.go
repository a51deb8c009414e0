package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// The permission authority (seed 001's attenuation, seed 003's stages and
// budgets). The store keeps each agent's own stage, policy and deadline and
// its own spend; perms holds them in memory with the subtree sums, so that
// an agent's effective policy is its ancestors' chain walked in memory
// (package policy decides; this file only gathers the facts). Everything
// that changes perms happens inside a store.Update, so checks made there
// see every earlier change.

// perms is the permission state of the agents that have any: a stage, a
// policy, a deadline, a spend or a spawn count under a budget.
type perms struct {
	mu     sync.Mutex
	cfg    policy.Config
	own    map[kin.AgentID]*permOwn
	spend  map[kin.AgentID]*spendRec
	timers map[kin.AgentID]*time.Timer
}

// permOwn is what an agent asked for itself.
type permOwn struct {
	stage      string
	policy     *kin.Policy
	deadlineAt time.Time
	// mountIDs are the files the policy check approved at the policy's
	// mount paths (grants.go).
	mountIDs map[string]fileID
}

// spendRec is an agent's spend: its own, and its subtree's (itself
// included), and how many descendants were ever spawned under it.
type spendRec struct {
	tokens, subTokens int64
	cost, subCost     float64
	spawns            int64
	exhausted         string
}

// Why a subtree was stopped for its budget: kin.Agent.EndReason values.
const (
	reasonBudget   = "budget_exhausted"
	reasonDeadline = "deadline"
)

func (p *perms) rec(id kin.AgentID) *spendRec {
	r := p.spend[id]
	if r == nil {
		r = &spendRec{}
		p.spend[id] = r
	}
	return r
}

// loadPerms reads the permission state at start: own policies, spends
// (summed up the tree) and spawn counts of budgeted agents.
func (d *Daemon) loadPerms(ctx context.Context) error {
	d.perm.own = map[kin.AgentID]*permOwn{}
	d.perm.spend = map[kin.AgentID]*spendRec{}
	d.perm.timers = map[kin.AgentID]*time.Timer{}
	rows, err := d.store.AgentPolicyList(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		o := &permOwn{stage: r.Stage, deadlineAt: r.DeadlineAt}
		if len(r.Policy) > 0 {
			var p storedPolicy
			if err := json.Unmarshal(r.Policy, &p); err != nil {
				return fmt.Errorf("agent %d: stored policy: %w", r.ID, err)
			}
			o.policy, o.mountIDs = &p.Policy, p.MountIDs
		}
		d.perm.own[r.ID] = o
		if o.policy != nil && o.policy.Budget != nil && o.policy.Budget.MaxDescendants != nil {
			d.perm.rec(r.ID).spawns = int64(len(d.lineage.subtree(r.ID)) - 1)
		}
	}
	spends, err := d.store.SpendList(ctx)
	if err != nil {
		return err
	}
	for _, s := range spends {
		r := d.perm.rec(s.ID)
		r.tokens, r.cost, r.exhausted = s.Tokens, s.Cost, s.Exhausted
		for _, a := range d.chainIDs(s.ID) {
			ar := d.perm.rec(a)
			ar.subTokens += s.Tokens
			ar.subCost += s.Cost
		}
	}
	return nil
}

// armDeadlines starts the timers of live agents with a deadline (after
// reconcile, so that the agents are known).
func (d *Daemon) armDeadlines(ctx context.Context) {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	for id, o := range d.perm.own {
		if !o.deadlineAt.IsZero() {
			if a, err := d.store.AgentGetByID(ctx, id); err == nil && a.Live() {
				d.armDeadlineLocked(id, o.deadlineAt)
			}
		}
	}
}

// chainIDs is id and its ancestors, id first.
func (d *Daemon) chainIDs(id kin.AgentID) []kin.AgentID {
	d.lineage.mu.RLock()
	defer d.lineage.mu.RUnlock()
	var out []kin.AgentID
	for a := id; a != 0 && d.lineage.hasLocked(a); a = d.lineage.parent[a] {
		out = append(out, a)
	}
	return out
}

// layersLocked is the effective policy's layers of an agent whose chain
// (itself first, then its ancestors) is ids; an extra link is the agent
// itself before it is registered. perm.mu is held.
func (d *Daemon) layersLocked(ids []kin.AgentID, extra *policy.Link) ([]kin.PolicyLayer, error) {
	var chain []policy.Link
	for i := len(ids) - 1; i >= 0; i-- {
		o := d.perm.own[ids[i]]
		if o == nil {
			continue
		}
		l, err := d.linkLocked(ids[i], o.stage, o.policy)
		if err != nil {
			return nil, err
		}
		chain = append(chain, l)
	}
	if extra != nil {
		chain = append(chain, *extra)
	}
	return policy.Layers(d.perm.cfg.GlobalDeny, chain), nil
}

func (d *Daemon) linkLocked(id kin.AgentID, stage string, p *kin.Policy) (policy.Link, error) {
	l := policy.Link{Agent: id, Stage: stage, Policy: p}
	if stage != "" {
		pr, err := d.perm.cfg.Preset(stage)
		if err != nil {
			return l, kin.Errorf(kin.ECodeInvalid, "stage: %v", err)
		}
		l.Preset = &pr
	}
	return l, nil
}

// layers is agent id's effective policy's layers.
func (d *Daemon) layers(id kin.AgentID) ([]kin.PolicyLayer, error) {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	return d.layersLocked(d.chainIDs(id), nil)
}

// stageOf is an agent's stage: its own, else its nearest ancestor's.
func (d *Daemon) stageOf(id kin.AgentID) string {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	for _, a := range d.chainIDs(id) {
		if o := d.perm.own[a]; o != nil && o.stage != "" {
			return o.stage
		}
	}
	return ""
}

// remainingLocked is what a new child of parent may still have: the least
// of every budgeted ancestor's remaining budget. A spawn takes one
// descendant from each. perm.mu is held.
func (d *Daemon) remainingLocked(parent kin.AgentID) policy.Remaining {
	var rem policy.Remaining
	for _, a := range d.chainIDs(parent) {
		o := d.perm.own[a]
		if o == nil {
			continue
		}
		if !o.deadlineAt.IsZero() && (rem.DeadlineAt.IsZero() || o.deadlineAt.Before(rem.DeadlineAt)) {
			rem.DeadlineAt = o.deadlineAt
		}
		if o.policy == nil || o.policy.Budget == nil {
			continue
		}
		b, r := o.policy.Budget, d.perm.spend[a]
		if r == nil {
			r = &spendRec{}
		}
		if b.MaxTokens != nil {
			rem.Tokens = minPtr(rem.Tokens, *b.MaxTokens-r.subTokens)
		}
		if b.MaxCost != nil {
			c := *b.MaxCost - r.subCost
			if rem.Cost == nil || c < *rem.Cost {
				rem.Cost = &c
			}
		}
		if b.MaxDescendants != nil {
			rem.Descendants = minPtr(rem.Descendants, *b.MaxDescendants-r.spawns-1)
		}
	}
	return rem
}

func minPtr(p *int64, v int64) *int64 {
	if p == nil || v < *p {
		return &v
	}
	return p
}

// exhaustedLocked says whether id's subtree or an ancestor's has run out
// of budget or time, and why; "" when not. perm.mu is held.
func (d *Daemon) exhaustedLocked(id kin.AgentID, now time.Time) (kin.AgentID, string) {
	for _, a := range d.chainIDs(id) {
		if r := d.perm.spend[a]; r != nil && r.exhausted != "" {
			return a, r.exhausted
		}
		o := d.perm.own[a]
		if o == nil {
			continue
		}
		if !o.deadlineAt.IsZero() && !now.Before(o.deadlineAt) {
			return a, fmt.Sprintf("the deadline of agent %d passed at %s", a, o.deadlineAt.Format(time.RFC3339))
		}
		if why := overBudget(o, d.perm.spend[a]); why != "" {
			return a, why
		}
	}
	return 0, ""
}

// overBudget says which cap of o's budget r has reached, or "".
func overBudget(o *permOwn, r *spendRec) string {
	if o == nil || o.policy == nil || o.policy.Budget == nil || r == nil {
		return ""
	}
	b := o.policy.Budget
	switch {
	case b.MaxTokens != nil && r.subTokens >= *b.MaxTokens:
		return fmt.Sprintf("max_tokens: the subtree used %d of %d tokens", r.subTokens, *b.MaxTokens)
	case b.MaxCost != nil && r.subCost >= *b.MaxCost:
		return fmt.Sprintf("max_cost: the subtree spent %.4g of %.4g", r.subCost, *b.MaxCost)
	}
	return ""
}

// admission is the permission part of a registration, decided inside the
// registration's transaction.
type admission struct {
	own     *permOwn // nil: the agent asks for nothing of its own
	policy  []byte
	layers  []kin.PolicyLayer
	counted []kin.AgentID // budgeted ancestors whose spawn count this takes
}

// admit checks a registration against the parent's effective policy and
// remaining budget (seed 001: a child only ever gets less). It runs inside
// the registration's store.Update; commit applies its result.
//
// mountIDs are what checkPermissionRequest found at the policy's mounts.
func (d *Daemon) admit(req *kin.RegisterRequest, mountIDs map[string]fileID, role string, env []string, now time.Time) (*admission, error) {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	var parentIDs []kin.AgentID
	var parentLayers []kin.PolicyLayer
	if req.Parent != 0 {
		parentIDs = d.chainIDs(req.Parent)
		var err error
		if parentLayers, err = d.layersLocked(parentIDs, nil); err != nil {
			return nil, err
		}
		if who, why := d.exhaustedLocked(req.Parent, now); why != "" {
			return nil, kin.Errorf(kin.ECodeBudget, "agent %d may not spawn: the budget of agent %d's subtree is exhausted (%s)", req.Parent, who, why)
		}
		flat := policy.Flatten(parentLayers)
		if s := flat.Spawn; s != nil && s.Allow != nil && !*s.Allow {
			return nil, kin.Errorf(kin.ECodeDenied, "agent %d may not spawn: its policy says spawn.allow false", req.Parent)
		}
		if s := flat.Spawn; s != nil && s.Roles != nil && !slices.Contains(s.Roles, role) {
			return nil, kin.Errorf(kin.ECodeDenied, "agent %d may not spawn role %q: its policy allows only %v", req.Parent, role, s.Roles)
		}
		if req.Life == kin.LifeDetached && flat.Detach != nil && !*flat.Detach {
			return nil, kin.Errorf(kin.ECodeDenied, "agent %d may not spawn detached children: its policy says detach false", req.Parent)
		}
	}
	ad := &admission{}
	link, err := d.linkLocked(0, req.Stage, req.Policy) // the agent itself, not yet registered
	if err != nil {
		return nil, err
	}
	var child kin.Policy
	if req.Policy != nil {
		child = *req.Policy
	}
	var layersForCheck []kin.PolicyLayer
	if req.Parent != 0 {
		layersForCheck = withoutGlobal(parentLayers)
	}
	rem := d.remainingLocked(req.Parent)
	if req.Parent != 0 && rem.Descendants != nil && *rem.Descendants < 0 {
		return nil, kin.Errorf(kin.ECodeBudget, "agent %d may not spawn: its subtree has spawned as many descendants as its budget's max_descendants allows", req.Parent)
	}
	if excess := policy.Exceeds(layersForCheck, rem, now, child, link.Preset); len(excess) > 0 {
		return nil, kin.Escalationf(excess, "the request asks for more than agent %d has:\n%s", req.Parent, policy.FormatExcess(excess))
	}
	if req.Stage != "" || req.Policy != nil {
		ad.own = &permOwn{stage: req.Stage, policy: req.Policy, mountIDs: mountIDs}
		if req.Policy != nil {
			b, err := json.Marshal(storedPolicy{Policy: *req.Policy, MountIDs: mountIDs})
			if err != nil {
				return nil, kin.Errorf(kin.ECodeInvalid, "policy: %v", err)
			}
			ad.policy = b
			if bu := req.Policy.Budget; bu != nil && bu.Deadline != nil {
				ad.own.deadlineAt = now.Add(time.Duration(*bu.Deadline))
			}
		}
	}
	if ad.layers, err = d.layersLocked(parentIDs, &link); err != nil {
		return nil, err
	}
	// A spawner passes down only the variables the child's policy lets
	// through.
	var excess []kin.Excess
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if dec := policy.AllowEnv(ad.layers, k); !dec.Allowed {
			excess = append(excess, kin.Excess{Field: "env", Asked: k, Parent: dec.Reason})
		}
	}
	if len(excess) > 0 {
		return nil, kin.Escalationf(excess, "the spawn passes environment variables the agent's policy does not let through:\n%s", policy.FormatExcess(excess))
	}
	for _, a := range parentIDs {
		if o := d.perm.own[a]; o != nil && o.policy != nil && o.policy.Budget != nil && o.policy.Budget.MaxDescendants != nil {
			ad.counted = append(ad.counted, a)
		}
	}
	return ad, nil
}

// commit records an admitted agent in memory once its registration is
// written, and arms its deadline.
func (d *Daemon) commit(id kin.AgentID, ad *admission) {
	if ad == nil {
		return
	}
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	for _, a := range ad.counted {
		d.perm.rec(a).spawns++
	}
	if ad.own != nil {
		d.perm.own[id] = ad.own
		if !ad.own.deadlineAt.IsZero() {
			d.armDeadlineLocked(id, ad.own.deadlineAt)
		}
	}
}

// armDeadlineLocked stops id's subtree when its deadline passes.
func (d *Daemon) armDeadlineLocked(id kin.AgentID, at time.Time) {
	if t := d.perm.timers[id]; t != nil {
		t.Stop()
	}
	d.perm.timers[id] = time.AfterFunc(max(time.Until(at), 0), func() {
		d.goExhaust(id, reasonDeadline, fmt.Sprintf("the deadline of agent %d passed at %s", id, at.Format(time.RFC3339)))
	})
}

// goExhaust runs exhaust in the background, owned by the daemon like the
// exit handlers (Close waits for it), unless the daemon is shutting down.
func (d *Daemon) goExhaust(id kin.AgentID, reason, why string) {
	d.rtMu.Lock()
	if d.shuttingDown {
		d.rtMu.Unlock()
		return
	}
	d.exitWG.Add(1)
	d.rtMu.Unlock()
	go func() {
		defer d.exitWG.Done()
		d.exhaust(id, reason, why)
	}()
}

// exhaust records that id's subtree ran out of budget or time and stops
// it: grace, then kill, its partial results kept (cancelTree copies them).
func (d *Daemon) exhaust(id kin.AgentID, reason, why string) {
	select {
	case <-d.closing:
		return
	default:
	}
	ctx := context.Background()
	a, err := d.store.AgentGetByID(ctx, id)
	if err != nil || a.State.Terminal() && a.Status == kin.StatusTerminated {
		return
	}
	err = d.store.Update(ctx, func(tx store.Tx) error {
		if err := tx.SpendSetExhausted(ctx, id, why); err != nil {
			return err
		}
		d.perm.mu.Lock()
		d.perm.rec(id).exhausted = why
		d.perm.mu.Unlock()
		return appendEvent(ctx, tx, d.now(), kin.EventBudgetExhausted, id, a.Parent, budgetData{Agent: id, Reason: reason, Detail: why})
	})
	if err != nil {
		d.log.Error("record exhausted budget", "agent", id, "err", err)
	}
	d.log.Info("budget exhausted: stopping the subtree", "agent", id, "why", why)
	if _, err := d.cancelTree(ctx, id, reason, nil, true, ""); err != nil {
		d.log.Error("stop exhausted subtree", "agent", id, "err", err)
	}
}

// budgetData is the budget.exhausted event.
type budgetData struct {
	Agent  kin.AgentID `json:"agent"`
	Reason string      `json:"reason"`
	Detail string      `json:"detail"`
}

// Policy returns an agent's requested and effective policy and spend.
func (d *Daemon) Policy(ctx context.Context, id kin.AgentID) (*kin.AgentPolicy, error) {
	if _, err := d.Agent(ctx, id); err != nil {
		return nil, err
	}
	layers, err := d.layers(id)
	if err != nil {
		return nil, err
	}
	out := &kin.AgentPolicy{Agent: id, Stage: d.stageOf(id), Effective: d.effective(id, layers)}
	d.perm.mu.Lock()
	if o := d.perm.own[id]; o != nil && o.policy != nil {
		p := *o.policy
		out.Requested = &p
	}
	out.Spend = d.spendLocked(id)
	d.perm.mu.Unlock()
	return out, nil
}

// effective is the effective policy of id from its layers.
func (d *Daemon) effective(id kin.AgentID, layers []kin.PolicyLayer) kin.EffectivePolicy {
	e := kin.EffectivePolicy{Layers: layers, Flat: policy.Flatten(layers)}
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	for _, a := range d.chainIDs(id) {
		if o := d.perm.own[a]; o != nil && !o.deadlineAt.IsZero() && (e.DeadlineAt.IsZero() || o.deadlineAt.Before(e.DeadlineAt)) {
			e.DeadlineAt = o.deadlineAt
		}
	}
	return e
}

// spendLocked is id's spend against the budget in force for its subtree:
// its own caps. perm.mu is held.
func (d *Daemon) spendLocked(id kin.AgentID) kin.Spend {
	var s kin.Spend
	if r := d.perm.spend[id]; r != nil {
		s = kin.Spend{Tokens: r.tokens, Cost: r.cost, SubtreeTokens: r.subTokens, SubtreeCost: r.subCost, SubtreeSpawns: r.spawns, Exhausted: r.exhausted}
	}
	if o := d.perm.own[id]; o != nil {
		s.DeadlineAt = o.deadlineAt
		if o.policy != nil && o.policy.Budget != nil {
			b := o.policy.Budget
			s.MaxTokens, s.MaxCost, s.MaxDescendants = b.MaxTokens, b.MaxCost, b.MaxDescendants
		}
	}
	return s
}

// spendOf returns id's spend when it has a budget or has spent, else nil
// (for kin tree).
func (d *Daemon) spendOf(id kin.AgentID) *kin.Spend {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	s := d.spendLocked(id)
	if s.SubtreeTokens == 0 && s.SubtreeCost == 0 && s.MaxTokens == nil && s.MaxCost == nil && s.MaxDescendants == nil && s.DeadlineAt.IsZero() && s.Exhausted == "" {
		return nil
	}
	return &s
}

// target is the agent a request is about: the caller for 0, checked to be
// the caller or in its subtree.
func (d *Daemon) target(ctx context.Context, id kin.AgentID, what string) (kin.AgentID, error) {
	c := callerOf(ctx)
	if id == 0 {
		if c.agent == 0 {
			if c.refused != "" {
				return 0, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
			}
			return 0, kin.Errorf(kin.ECodeInvalid, "%s: name the agent (the operator is not an agent)", what)
		}
		return c.agent, nil
	}
	if !d.lineage.has(id) {
		return 0, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	if err := d.authorize(ctx, id, true); err != nil {
		return 0, err
	}
	return id, nil
}

// Authorize decides whether an agent may use a tool now: its effective
// policy, and whether its subtree still has budget and time.
func (d *Daemon) Authorize(ctx context.Context, req kin.AuthorizeRequest) (*kin.Decision, error) {
	id, err := d.target(ctx, req.Agent, "authorize")
	if err != nil {
		return nil, err
	}
	if err := checkToolName(req.Tool); err != nil {
		return nil, err
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return nil, kin.Errorf(kin.ECodeInvalid, "input is not valid JSON")
	}
	d.perm.mu.Lock()
	who, why := d.exhaustedLocked(id, d.now())
	d.perm.mu.Unlock()
	var dec kin.Decision
	if why != "" {
		dec = kin.Decision{Reason: fmt.Sprintf("the budget of agent %d's subtree is exhausted: %s", who, why), Rule: "budget", Source: kin.SourcePolicy, Agent: who}
	} else {
		layers, err := d.layers(id)
		if err != nil {
			return nil, err
		}
		dec, _ = policy.AllowTool(layers, req.Tool)
	}
	if !dec.Allowed {
		a, _ := d.store.AgentGetByID(ctx, id)
		parent := kin.AgentID(0)
		if a != nil {
			parent = a.Parent
		}
		err := d.store.Update(ctx, func(tx store.Tx) error {
			return appendEvent(ctx, tx, d.now(), kin.EventToolDenied, id, parent, toolDeniedData{Agent: id, Tool: req.Tool, Reason: dec.Reason})
		})
		if err != nil {
			return nil, d.storeError(err)
		}
	}
	return &dec, nil
}

// toolDeniedData is the tool.denied event.
type toolDeniedData struct {
	Agent  kin.AgentID `json:"agent"`
	Tool   string      `json:"tool"`
	Reason string      `json:"reason"`
}

func checkToolName(t string) error {
	if t == "" {
		return kin.Errorf(kin.ECodeInvalid, "tool is empty: name the tool (e.g. read, exec, web_search)")
	}
	if len(t) > 128 {
		return kin.Errorf(kin.ECodeInvalid, "tool name is %d bytes long; at most 128 are allowed", len(t))
	}
	for i, r := range t {
		if r <= ' ' || r == 0x7f || r == '*' || r == '?' {
			return kin.Errorf(kin.ECodeInvalid, "tool name %q has a space, a control character or a glob character at byte %d", t, i)
		}
	}
	return nil
}

// Explain says why an agent may or may not use a tool or reach a path.
func (d *Daemon) Explain(ctx context.Context, req kin.ExplainRequest) (*kin.Explanation, error) {
	if (req.Tool == "") == (req.Path == "") {
		return nil, kin.Errorf(kin.ECodeInvalid, "explain needs exactly one of a tool or a path")
	}
	id, err := d.target(ctx, req.Agent, "explain")
	if err != nil {
		return nil, err
	}
	layers, err := d.layers(id)
	if err != nil {
		return nil, err
	}
	out := &kin.Explanation{Agent: id, Tool: req.Tool, Path: req.Path}
	if req.Tool != "" {
		if err := checkToolName(req.Tool); err != nil {
			return nil, err
		}
		out.Decision, out.Steps = policy.AllowTool(layers, req.Tool)
		d.perm.mu.Lock()
		who, why := d.exhaustedLocked(id, d.now())
		d.perm.mu.Unlock()
		if why != "" {
			out.Decision = kin.Decision{Reason: fmt.Sprintf("the budget of agent %d's subtree is exhausted: %s", who, why), Rule: "budget", Source: kin.SourcePolicy, Agent: who}
		}
		return out, nil
	}
	out.Mode, out.Decision, out.Steps = policy.PathMode(layers, req.Path)
	return out, nil
}

// Usage reports spend: it counts against the agent and every ancestor, and
// a subtree that reaches a cap is stopped.
func (d *Daemon) Usage(ctx context.Context, req kin.UsageRequest) (*kin.Spend, error) {
	id, err := d.target(ctx, req.Agent, "usage")
	if err != nil {
		return nil, err
	}
	if req.Tokens < 0 || req.Cost < 0 || math.IsNaN(req.Cost) || math.IsInf(req.Cost, 0) {
		return nil, kin.Errorf(kin.ECodeInvalid, "usage must be non-negative and finite (tokens %d, cost %v)", req.Tokens, req.Cost)
	}
	if req.Tokens == 0 && req.Cost == 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "usage reports nothing: give --tokens or --cost")
	}
	a, err := d.Agent(ctx, id)
	if err != nil {
		return nil, err
	}
	chain := d.chainIDs(id)
	var over []kin.AgentID
	var whys []string
	err = d.store.Update(ctx, func(tx store.Tx) error {
		over, whys = nil, nil
		if err := tx.SpendAdd(ctx, id, req.Tokens, req.Cost); err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, d.now(), kin.EventAgentUsage, id, a.Parent, usageData{Agent: id, Tokens: req.Tokens, Cost: req.Cost}); err != nil {
			return err
		}
		d.perm.mu.Lock()
		defer d.perm.mu.Unlock()
		r := d.perm.rec(id)
		r.tokens += req.Tokens
		r.cost += req.Cost
		for _, c := range chain {
			cr := d.perm.rec(c)
			cr.subTokens += req.Tokens
			cr.subCost += req.Cost
			if cr.exhausted == "" {
				if why := overBudget(d.perm.own[c], cr); why != "" {
					over, whys = append(over, c), append(whys, why)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	// The highest exhausted ancestor's stop covers the rest.
	if n := len(over); n > 0 {
		d.goExhaust(over[n-1], reasonBudget, whys[n-1])
	}
	d.perm.mu.Lock()
	s := d.spendLocked(id)
	d.perm.mu.Unlock()
	if len(over) > 0 {
		s.Exhausted = whys[len(whys)-1]
	}
	return &s, nil
}

// usageData is the agent.usage event.
type usageData struct {
	Agent  kin.AgentID `json:"agent"`
	Tokens int64       `json:"tokens,omitempty"`
	Cost   float64     `json:"cost,omitempty"`
}

// Promote changes an agent's stage; only its parent or the operator may,
// never the agent itself, and never beyond the parent's effective policy.
func (d *Daemon) Promote(ctx context.Context, req kin.PromoteRequest) (*kin.Agent, error) {
	a, err := d.Agent(ctx, req.Agent)
	if err != nil {
		return nil, err
	}
	c := callerOf(ctx)
	switch {
	case c.refused != "":
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	case c.agent == a.ID:
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not promote itself: only its parent or the operator may", a.ID)
	case !c.operator() && c.agent != a.Parent:
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not promote agent %d: only its parent (%d) or the operator may", c.agent, a.ID, a.Parent)
	}
	if req.Stage == "" {
		return nil, kin.Errorf(kin.ECodeInvalid, "stage is empty: name the stage (%s)", strings.Join(presetNames(d.perm.cfg), ", "))
	}
	pr, err := d.perm.cfg.Preset(req.Stage)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "stage: %v", err)
	}
	from := ""
	err = d.store.Update(ctx, func(tx store.Tx) error {
		d.perm.mu.Lock()
		defer d.perm.mu.Unlock()
		if a.Parent != 0 {
			parentLayers, err := d.layersLocked(d.chainIDs(a.Parent), nil)
			if err != nil {
				return err
			}
			if excess := policy.Exceeds(withoutGlobal(parentLayers), policy.Remaining{}, d.now(), kin.Policy{}, &pr); len(excess) > 0 {
				return kin.Escalationf(excess, "stage %q gives more than agent %d has:\n%s", req.Stage, a.Parent, policy.FormatExcess(excess))
			}
		}
		now := d.now()
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, Stage: &req.Stage}); err != nil {
			return err
		}
		o := d.perm.own[a.ID]
		if o != nil {
			from = o.stage
		}
		if err := appendEvent(ctx, tx, now, kin.EventAgentPromoted, a.ID, a.Parent, promotedData{Agent: a.ID, From: from, To: req.Stage, By: c.createdBy()}); err != nil {
			return err
		}
		if o == nil {
			o = &permOwn{}
			d.perm.own[a.ID] = o
		}
		o.stage = req.Stage
		return nil
	})
	if err != nil {
		if kin.ErrorCodeOf(err) != kin.ECodeInternal {
			return nil, err
		}
		return nil, d.storeError(err)
	}
	return d.Agent(ctx, a.ID)
}

// promotedData is the agent.promoted event.
type promotedData struct {
	Agent kin.AgentID `json:"agent"`
	From  string      `json:"from"`
	To    string      `json:"to"`
	By    string      `json:"by"`
}

// canonicalMounts resolves the links in a policy's mount paths as the
// daemon sees them, so that the attenuation check and Landlock judge the
// same file: "/work/link -> /etc" asked as rw is /etc asked as rw. Paths
// that do not exist stay as given (Landlock skips them).
func canonicalMounts(p *kin.Policy) (*kin.Policy, error) {
	if p == nil || p.Mounts == nil {
		return p, nil
	}
	out := *p
	out.Mounts = make(map[string]kin.Mode, len(p.Mounts))
	for path, m := range p.Mounts {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			real = path
		}
		if prev, ok := out.Mounts[real]; ok && prev.Rank() < m.Rank() {
			m = prev
		}
		out.Mounts[real] = m
	}
	if err := policy.Validate(out); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "policy after resolving links: %v", err)
	}
	return &out, nil
}

// presetNames are the stages the daemon knows, sorted.
func presetNames(c policy.Config) []string {
	names := make([]string, 0, len(c.Presets))
	for n := range c.Presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// policyControl is what an agent's control files and handoff show of its
// effective policy: the flattened policy as one line of JSON, the mounts
// as JSON and as "path mode" lines.
func (d *Daemon) policyControl(id kin.AgentID) (flatJSON, mountsJSON []byte, lines []string) {
	layers, err := d.layers(id)
	if err != nil || len(layers) == 0 {
		return nil, nil, nil // no policy anywhere: the files stay empty
	}
	flat := policy.Flatten(layers)
	flatJSON, _ = json.Marshal(flat)
	if flat.Mounts != nil {
		mountsJSON, _ = json.Marshal(flat.Mounts)
		for p, m := range flat.Mounts {
			lines = append(lines, p+" "+string(m))
		}
		slices.Sort(lines)
	}
	return flatJSON, mountsJSON, lines
}

// flatPolicy is id's effective policy flattened, and false when no agent
// in its chain has a policy or stage (the common case, answered without
// building layers: the global deny list, tools only, changes nothing that
// is flattened). The background writer asks it for every agent it touches.
func (d *Daemon) flatPolicy(id kin.AgentID) (kin.Policy, bool) {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	if len(d.perm.own) == 0 {
		return kin.Policy{}, false
	}
	chain := d.chainIDs(id)
	if !slices.ContainsFunc(chain, func(a kin.AgentID) bool { return d.perm.own[a] != nil }) {
		return kin.Policy{}, false
	}
	layers, err := d.layersLocked(chain, nil)
	if err != nil {
		return kin.Policy{}, false
	}
	return policy.Flatten(layers), true
}

// loadPolicyConfig reads the operator's policy configuration, or ships the
// defaults for "".
func loadPolicyConfig(path string) (policy.Config, error) {
	if path == "" {
		return policy.DefaultConfig(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return policy.Config{}, fmt.Errorf("policy config: %w", err)
	}
	c, err := policy.ParseConfig(b)
	if err != nil {
		return policy.Config{}, fmt.Errorf("policy config %s: %w", path, err)
	}
	return c, nil
}

// stopTimers stops every deadline timer (at Close).
func (d *Daemon) stopTimers() {
	d.perm.mu.Lock()
	defer d.perm.mu.Unlock()
	for id, t := range d.perm.timers {
		t.Stop()
		delete(d.perm.timers, id)
	}
}

// withoutGlobal drops the global deny list from a parent's layers for the
// attenuation check: every agent carries it anyway, so a child asking for a
// tool it blocks asks for nothing its parent lacks (and gets nothing: the
// list stays in the child's own layers, and kin explain names it).
func withoutGlobal(layers []kin.PolicyLayer) []kin.PolicyLayer {
	out := make([]kin.PolicyLayer, 0, len(layers))
	for _, l := range layers {
		if l.Source != kin.SourceGlobal {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil // no layer of an agent's own: the operator's reach
	}
	return out
}
