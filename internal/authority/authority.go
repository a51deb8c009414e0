package authority

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Authority is the permission authority: it answers kin.AuthorityService,
// admits registrations inside their transaction (Admit), and stops
// subtrees that run out of budget or time (through Config.Stop).
//
// Checks that guard a write (Admit, Usage, Promote) read their chain from
// the store inside the write's transaction (store.PermChain), so a limit
// holds however the store batches commits and however many daemons share
// it. own and spend cache the same facts for the checks that only read
// (Authorize, Explain, Policy, the agent filesystem's control files); they
// change only after a commit (store.AfterCommit), never inside a
// transaction, and Load rebuilds them from the store.
type Authority struct {
	st     store.Store
	lin    *lineage.Tree
	cfg    policy.Config
	clock  func() time.Time
	log    *slog.Logger
	stop   func(ctx context.Context, id kin.AgentID, reason string) (func() error, error)
	limits func(flat kin.Policy) []kin.ResourceLimit
	quota  *quota.Limiter

	mu    sync.Mutex // guards own, spend, via, timers and closed
	own   map[kin.AgentID]*permOwn
	spend map[kin.AgentID]*spendRec
	// via maps an agent whose spawn was escalated (seed 002 §4.1) to the
	// agent that asked for it: its permission chain goes through that
	// one's (chainIDs), so it never has more than its asker.
	via    map[kin.AgentID]kin.AgentID
	timers map[kin.AgentID]*time.Timer
	closed bool
	// uncapped maps an agent that made a model call to its permission
	// chain's ids, when a metering transaction read that chain from the
	// store and found no link whose policy has a max_tokens or max_cost
	// (the caps addSpend checks). Neither can change after: an agent's
	// stored policy, parent_id and requested_by are written once, at its
	// registration, by whichever host of the fleet registers it, and no
	// agent row is ever deleted; a promotion changes the stage only,
	// which the caps do not read. So the agent's later model calls skip
	// the chain's read and its checks (addSpend). Bounded: emptied at
	// maxUncapped entries.
	uncapped map[kin.AgentID][]kin.AgentID
	// meterChains counts the model calls whose metering read their chain
	// (MeterChainReads).
	meterChains atomic.Int64
	wg          sync.WaitGroup // exhausts running in the background
}

// Config is what an Authority is built from.
type Config struct {
	Store   store.Store
	Lineage *lineage.Tree
	Policy  policy.Config // presets and the global deny list
	Clock   func() time.Time
	Log     *slog.Logger
	// Quota limits the rate of what agents report (usage, promotions,
	// denied authorizations); nil: none.
	Quota *quota.Limiter
	// Stop claims id's subtree, id included, for reason (ReasonBudget,
	// ReasonDeadline): from its return on, an agent of it that ends is
	// recorded by the stop, for reason. finish then stops it: grace, then
	// kill, partial results kept.
	Stop func(ctx context.Context, id kin.AgentID, reason string) (finish func() error, err error)
	// Limits lists the kernel limits that bind an agent of flattened
	// policy flat on this host, and how (the runner's LimitsOf); nil
	// leaves EffectivePolicy.Limits empty.
	Limits func(flat kin.Policy) []kin.ResourceLimit
}

// New makes an Authority and loads its cache from the store.
func New(ctx context.Context, c Config) (*Authority, error) {
	au := &Authority{st: c.Store, lin: c.Lineage, cfg: c.Policy, clock: c.Clock, log: c.Log, stop: c.Stop, limits: c.Limits, quota: c.Quota,
		timers: map[kin.AgentID]*time.Timer{}, via: map[kin.AgentID]kin.AgentID{}}
	if au.log == nil {
		au.log = slog.New(slog.DiscardHandler)
	}
	if err := au.Load(ctx); err != nil {
		return nil, err
	}
	return au, nil
}

func (au *Authority) now() time.Time { return au.clock() }

// PolicyConfig is the presets and global deny list in force.
func (au *Authority) PolicyConfig() policy.Config { return au.cfg }

// Close stops the deadline timers, refuses new exhausts and waits for
// those running.
func (au *Authority) Close() {
	au.mu.Lock()
	au.closed = true
	for id, t := range au.timers {
		t.Stop()
		delete(au.timers, id)
	}
	au.mu.Unlock()
	au.wg.Wait()
}

// permOwn is what an agent asked for itself.
type permOwn struct {
	stage      string
	policy     *kin.Policy
	deadlineAt time.Time
	// mountIDs are the files the policy check approved at the policy's
	// mount paths (mounts.go).
	mountIDs map[string]FileID
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
	ReasonBudget   = "budget_exhausted"
	ReasonDeadline = "deadline"
)

func (au *Authority) rec(id kin.AgentID) *spendRec {
	r := au.spend[id]
	if r == nil {
		r = &spendRec{}
		au.spend[id] = r
	}
	return r
}

// Load (re)builds the cache from the store.
func (au *Authority) Load(ctx context.Context) error {
	own, spend, via, err := readPerms(ctx, au.st)
	if err != nil {
		return err
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	au.own, au.spend, au.via = own, spend, via
	au.uncapped = nil
	return nil
}

// readPerms reads what perms caches: own policies, spends and the subtree
// counters, and the askers of escalated spawns.
func readPerms(ctx context.Context, st store.Reader) (map[kin.AgentID]*permOwn, map[kin.AgentID]*spendRec, map[kin.AgentID]kin.AgentID, error) {
	own := map[kin.AgentID]*permOwn{}
	spend := map[kin.AgentID]*spendRec{}
	via := map[kin.AgentID]kin.AgentID{}
	rows, err := st.AgentPolicyList(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, r := range rows {
		o, err := ownOf(r.ID, r.Stage, r.Policy, r.DeadlineAt)
		if err != nil {
			return nil, nil, nil, err
		}
		if o != nil {
			own[r.ID] = o
		}
		if r.RequestedBy != 0 {
			via[r.ID] = r.RequestedBy
		}
	}
	spends, err := st.SpendList(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, s := range spends {
		spend[s.ID] = spendRecOf(s)
	}
	return own, spend, via, nil
}

// CacheDiff lists how the cache differs from what the store holds: each
// difference in words, none when they agree. Load would make them agree;
// tests use it to show that no write leaves the cache ahead of the store.
func (au *Authority) CacheDiff(ctx context.Context) ([]string, error) {
	own, spend, via, err := readPerms(ctx, au.st)
	if err != nil {
		return nil, err
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	var diffs []string
	for _, id := range unionKeys(via, au.via) {
		if via[id] != au.via[id] {
			diffs = append(diffs, fmt.Sprintf("authority: agent %d's asker cached %d, stored %d", id, au.via[id], via[id]))
		}
	}
	for _, id := range unionKeys(own, au.own) {
		a, b := own[id], au.own[id]
		if (a == nil) != (b == nil) || a != nil && (a.stage != b.stage || !a.deadlineAt.Equal(b.deadlineAt) || !reflect.DeepEqual(a.policy, b.policy)) {
			diffs = append(diffs, fmt.Sprintf("authority: agent %d's own policy cached %+v, stored %+v", id, b, a))
		}
	}
	for _, id := range unionKeys(spend, au.spend) {
		var a, b spendRec
		if r := spend[id]; r != nil {
			a = *r
		}
		if r := au.spend[id]; r != nil {
			b = *r
		}
		if a != b {
			diffs = append(diffs, fmt.Sprintf("authority: agent %d's spend cached %+v, stored %+v", id, b, a))
		}
	}
	return diffs, nil
}

func unionKeys[V any](a, b map[kin.AgentID]V) []kin.AgentID {
	ids := slices.Collect(maps.Keys(a))
	for id := range b {
		if _, ok := a[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ownOf is what an agent asked for itself, from its stored row; nil when
// it asked for nothing.
func ownOf(id kin.AgentID, stage string, pol []byte, deadline time.Time) (*permOwn, error) {
	if stage == "" && len(pol) == 0 && deadline.IsZero() {
		return nil, nil
	}
	o := &permOwn{stage: stage, deadlineAt: deadline}
	if len(pol) > 0 {
		var p storedPolicy
		if err := json.Unmarshal(pol, &p); err != nil {
			return nil, fmt.Errorf("agent %d: stored policy: %w", id, err)
		}
		o.policy, o.mountIDs = &p.Policy, p.MountIDs
	}
	return o, nil
}

func spendRecOf(s store.SpendRow) *spendRec {
	return &spendRec{tokens: s.Tokens, cost: s.Cost, subTokens: s.SubTokens, subCost: s.SubCost, spawns: s.Spawns, exhausted: s.Exhausted}
}

// permLink is one agent of a chain as a check reads it.
type permLink struct {
	id    kin.AgentID
	own   *permOwn // nil: it asked for nothing of its own
	spend spendRec
	via   kin.AgentID // the asker of its escalated spawn, or 0
}

// chainInTx reads id's chain (id first, then its ancestors) inside a
// transaction: the facts a check that guards a write decides on. A policy
// never changes once stored, so its parsed form comes from the cache when
// there; stage, deadline and counters always from the store.
func (au *Authority) chainInTx(ctx context.Context, tx store.Tx, id kin.AgentID) ([]permLink, error) {
	if id == 0 {
		return nil, nil
	}
	rows, err := tx.PermChain(ctx, id)
	if err != nil {
		return nil, err
	}
	return au.chainOf(rows)
}

// chainOf is the chain of rows store.PermChain read (in a transaction).
func (au *Authority) chainOf(rows []store.PermRow) ([]permLink, error) {
	chain := make([]permLink, len(rows))
	au.mu.Lock()
	defer au.mu.Unlock()
	for i, r := range rows {
		chain[i] = permLink{id: r.ID, spend: *spendRecOf(r.Spend), via: r.RequestedBy}
		if r.Stage == "" && len(r.Policy) == 0 && r.DeadlineAt.IsZero() {
			continue
		}
		o := &permOwn{stage: r.Stage, deadlineAt: r.DeadlineAt}
		if c := au.own[r.ID]; len(r.Policy) > 0 && c != nil && c.policy != nil {
			o.policy, o.mountIDs = c.policy, c.mountIDs // a stored policy never changes
		} else if len(r.Policy) > 0 {
			parsed, err := ownOf(r.ID, "", r.Policy, time.Time{})
			if err != nil {
				return nil, err
			}
			o.policy, o.mountIDs = parsed.policy, parsed.mountIDs
		}
		chain[i].own = o
	}
	return chain, nil
}

// Learn caches the own layers (stage, policy) of agent id's chain (itself
// and its ancestors, through an escalated agent's asker) as the store has
// them now, replacing what the cache held: an agent another host of the
// fleet admitted and placed here (kin spawn --host) starts with the policy
// that host admitted, its ancestors' on other hosts included; the store's
// follower calls it for an agent another host registered and for any
// promotion, so every host answers with the same layers. Its deadline
// stays armed on the host that admitted it.
func (au *Authority) Learn(ctx context.Context, id kin.AgentID) error {
	rows, err := au.st.PermChain(ctx, id)
	if err != nil {
		return err
	}
	chain, err := au.chainOf(rows)
	if err != nil {
		return err
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, l := range chain {
		if l.own != nil {
			au.own[l.id] = l.own
		} else {
			delete(au.own, l.id) // promoted back to no stage of its own
		}
		if l.via != 0 {
			au.via[l.id] = l.via
		}
	}
	return nil
}

// Escalated records that agent id's spawn was asked for by agent by and
// escalated (seed 002 §4.1), as another host of the fleet committed it:
// id's permission chain goes through by's.
func (au *Authority) Escalated(id, by kin.AgentID) {
	au.mu.Lock()
	defer au.mu.Unlock()
	au.via[id] = by
}

// chainLocked is id's chain from the cache. perm.mu is held.
func (au *Authority) chainLocked(id kin.AgentID) []permLink {
	ids := au.chainIDs(id)
	chain := make([]permLink, len(ids))
	for i, a := range ids {
		chain[i] = permLink{id: a, own: au.own[a]}
		if r := au.spend[a]; r != nil {
			chain[i].spend = *r
		}
	}
	return chain
}

// ArmDeadlines starts the timers of live agents with a deadline (after
// reconcile, so that the agents are known).
func (au *Authority) ArmDeadlines(ctx context.Context) {
	au.mu.Lock()
	defer au.mu.Unlock()
	for id, o := range au.own {
		if !o.deadlineAt.IsZero() {
			// An ended agent's deadline still binds the agents escalated
			// from its subtree (exhaust).
			if a, err := au.st.AgentGetByID(ctx, id); err == nil && (a.Live() || len(au.escalatedFromLocked(id)) > 0) {
				au.armDeadlineLocked(id, o.deadlineAt)
			}
		}
	}
}

// chainIDs is id's permission chain, id first: its ancestors, except that
// after an agent whose spawn was escalated comes the agent that asked for
// it and that one's chain (a descendant of the escalated agent's parent,
// so the chain still holds every ancestor). au.mu is held.
func (au *Authority) chainIDs(id kin.AgentID) []kin.AgentID {
	if len(au.via) == 0 {
		return au.lin.Chain(id) // no escalation anywhere: the lineage's chain
	}
	// One walk under the lineage's lock (never a loop, whatever the cache
	// holds). via keeps the links of ended agents: what an ended agent had
	// (kin policy, its replacement's chain) and what an agent escalated
	// from it has go through them.
	return au.lin.ChainVia(id, au.viaOf)
}

// viaOf is the asker of agent a's escalated spawn, or 0. au.mu is held.
func (au *Authority) viaOf(a kin.AgentID) kin.AgentID { return au.via[a] }

// layersOf is the effective policy's layers of the agent whose chain
// (itself first, then its ancestors) is chain; an extra link is the agent
// itself before it is registered.
func (au *Authority) layersOf(chain []permLink, extra *policy.Link) ([]kin.PolicyLayer, error) {
	var links []policy.Link
	for i := len(chain) - 1; i >= 0; i-- {
		o := chain[i].own
		if o == nil {
			continue
		}
		l, err := au.link(chain[i].id, o.stage, o.policy)
		if err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	if extra != nil {
		links = append(links, *extra)
	}
	return policy.Layers(au.cfg.GlobalDeny, links), nil
}

func (au *Authority) link(id kin.AgentID, stage string, p *kin.Policy) (policy.Link, error) {
	l := policy.Link{Agent: id, Stage: stage, Policy: p}
	if stage != "" {
		pr, err := au.cfg.Preset(stage)
		if err != nil {
			return l, kin.Errorf(kin.ECodeInvalid, "stage: %v", err)
		}
		l.Preset = &pr
	}
	return l, nil
}

// Layers is agent id's effective policy's layers.
func (au *Authority) Layers(id kin.AgentID) ([]kin.PolicyLayer, error) {
	au.mu.Lock()
	chain := au.chainLocked(id)
	au.mu.Unlock()
	return au.layersOf(chain, nil)
}

// Own is what agent id asked for itself: its own stage and policy (not
// inherited), "" and nil where it asked for none; what its replacement
// asks for again.
func (au *Authority) Own(id kin.AgentID) (string, *kin.Policy) {
	au.mu.Lock()
	defer au.mu.Unlock()
	o := au.own[id]
	if o == nil {
		return "", nil
	}
	var p *kin.Policy
	if o.policy != nil {
		c := *o.policy
		p = &c
	}
	return o.stage, p
}

// Stage is an agent's stage: its own, else its nearest ancestor's.
func (au *Authority) Stage(id kin.AgentID) string {
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, a := range au.chainIDs(id) {
		if o := au.own[a]; o != nil && o.stage != "" {
			return o.stage
		}
	}
	return ""
}

// remainingOf is what a new child of the agent whose chain is chain may
// still have: the least of every budgeted ancestor's remaining budget. A
// spawn takes one descendant from each.
func remainingOf(chain []permLink) policy.Remaining {
	var rem policy.Remaining
	for _, l := range chain {
		o := l.own
		if o == nil {
			continue
		}
		if !o.deadlineAt.IsZero() && (rem.DeadlineAt.IsZero() || o.deadlineAt.Before(rem.DeadlineAt)) {
			rem.DeadlineAt = o.deadlineAt
		}
		if o.policy == nil || o.policy.Budget == nil {
			continue
		}
		b, r := o.policy.Budget, l.spend
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

// exhaustedOf says whether the subtree of the agent whose chain is chain,
// or an ancestor's, has run out of budget or time, and why; "" when not.
func exhaustedOf(chain []permLink, now time.Time) (kin.AgentID, string) {
	for _, l := range chain {
		if l.spend.exhausted != "" {
			return l.id, l.spend.exhausted
		}
		o := l.own
		if o == nil {
			continue
		}
		if !o.deadlineAt.IsZero() && !now.Before(o.deadlineAt) {
			return l.id, fmt.Sprintf("the deadline of agent %d passed at %s", l.id, o.deadlineAt.Format(time.RFC3339))
		}
		if why := overBudget(o, &l.spend); why != "" {
			return l.id, why
		}
	}
	return 0, ""
}

// exhausted is exhaustedOf id's chain in the cache.
func (au *Authority) exhausted(id kin.AgentID, now time.Time) (kin.AgentID, string) {
	au.mu.Lock()
	defer au.mu.Unlock()
	return exhaustedOf(au.chainLocked(id), now)
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

// Admission is the permission part of a registration, decided inside the
// registration's transaction: what the caller stores with the agent.
type Admission struct {
	Policy     []byte        // the agent's own policy to store (with its mount ids), or nil
	DeadlineAt time.Time     // its budget's absolute deadline, or zero
	Counted    []kin.AgentID // budgeted ancestors whose spawn count this takes (store.Tx.SpendSpawnAdd)
	// Via is the agent that asked for an escalated spawn (the registry
	// sets it): the admitted agent's permission chain goes through it.
	Via    kin.AgentID
	own    *permOwn // nil: the agent asks for nothing of its own
	layers []kin.PolicyLayer
	// chain is the parent's chain as the transaction read it: what the
	// cache lacks of it (ancestors another host of the fleet registered)
	// is added at Admitted, so the agent's sandbox here has every layer.
	chain []permLink
}

// NeedsSandbox reports whether the admitted agent's processes must run
// under the sandbox shim: restricted mounts or process limits.
func (ad *Admission) NeedsSandbox() bool {
	if ad == nil {
		return false
	}
	flat := policy.Flatten(ad.layers)
	return flat.Mounts != nil || HasLimits(flat.Budget)
}

// HasLimits reports whether a budget limits the process itself (CPU,
// memory, open files): what only the sandbox shim can set.
func HasLimits(b *kin.Budget) bool {
	return b != nil && (b.CPUSeconds != nil || b.MemoryBytes != nil || b.OpenFiles != nil)
}

// CheckRequest validates a registration's policy and stage before its
// transaction: the policy's mount paths resolved to the files they name
// (canonicalMounts) and those files' identities recorded (the returned
// map, for Admit), the stage known.
func (au *Authority) CheckRequest(req *kin.RegisterRequest) (map[string]FileID, error) {
	var ids map[string]FileID
	if req.Policy != nil {
		if err := policy.Validate(*req.Policy); err != nil {
			return nil, kin.Errorf(kin.ECodeInvalid, "policy: %v", err)
		}
		p, err := canonicalMounts(req.Policy)
		if err != nil {
			return nil, err
		}
		req.Policy = p
		if ids, err = identifyMounts(p); err != nil {
			return nil, err
		}
	}
	if req.Stage != "" {
		if _, err := au.cfg.Preset(req.Stage); err != nil {
			return nil, kin.Errorf(kin.ECodeInvalid, "stage: %v", err)
		}
	}
	return ids, nil
}

// Admit checks a registration against the parent's effective policy and
// remaining budget (seed 001: a child only ever gets less), as the store
// has them inside the registration's transaction, and counts the spawn
// against every ancestor whose budget limits descendants (ad.Counted, which
// the caller writes with the agent). Its result reaches the cache only
// after the commit (admitted).
//
// parentRows are the parent's chain as store.PermChain read it in tx (the
// registry reads it once, for the governor's facts too); mountIDs are what
// CheckRequest found at the policy's mounts.
func (au *Authority) Admit(ctx context.Context, tx store.Tx, req *kin.RegisterRequest, parentRows []store.PermRow, mountIDs map[string]FileID, role string, env []string, now time.Time) (*Admission, error) {
	parentChain, err := au.chainOf(parentRows)
	if err != nil {
		return nil, err
	}
	var parentLayers []kin.PolicyLayer
	if req.Parent != 0 {
		if parentLayers, err = au.layersOf(parentChain, nil); err != nil {
			return nil, err
		}
		if who, why := exhaustedOf(parentChain, now); why != "" {
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
	ad := &Admission{chain: parentChain}
	self, err := au.link(0, req.Stage, req.Policy) // the agent itself, not yet registered
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
	rem := remainingOf(parentChain)
	if req.Parent != 0 && rem.Descendants != nil && *rem.Descendants < 0 {
		return nil, kin.Errorf(kin.ECodeBudget, "agent %d may not spawn: its subtree has spawned as many descendants as its budget's max_descendants allows", req.Parent)
	}
	if excess := policy.Exceeds(layersForCheck, rem, now, child, self.Preset); len(excess) > 0 {
		return nil, kin.Escalationf(excess, "the request asks for more than agent %d has:\n%s", req.Parent, policy.FormatExcess(excess))
	}
	if req.Stage != "" || req.Policy != nil {
		ad.own = &permOwn{stage: req.Stage, policy: req.Policy, mountIDs: mountIDs}
		if req.Policy != nil {
			b, err := json.Marshal(storedPolicy{Policy: *req.Policy, MountIDs: mountIDs})
			if err != nil {
				return nil, kin.Errorf(kin.ECodeInvalid, "policy: %v", err)
			}
			ad.Policy = b
			if bu := req.Policy.Budget; bu != nil && bu.Deadline != nil {
				ad.own.deadlineAt = now.Add(time.Duration(*bu.Deadline))
				ad.DeadlineAt = ad.own.deadlineAt
			}
		}
	}
	if ad.layers, err = au.layersOf(parentChain, &self); err != nil {
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
	for _, l := range parentChain {
		if o := l.own; o != nil && o.policy != nil && o.policy.Budget != nil && o.policy.Budget.MaxDescendants != nil {
			ad.Counted = append(ad.Counted, l.id)
		}
	}
	return ad, nil
}

// Admitted records an admitted agent in the cache once its registration
// committed, and arms its deadline.
func (au *Authority) Admitted(id kin.AgentID, ad *Admission) {
	if ad == nil {
		return
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, a := range ad.Counted {
		au.rec(a).spawns++
	}
	for _, l := range ad.chain {
		if l.own != nil && au.own[l.id] == nil {
			au.own[l.id] = l.own // an ancestor registered by another host
		}
		if l.via != 0 {
			au.via[l.id] = l.via
		}
	}
	if ad.Via != 0 {
		au.via[id] = ad.Via
	}
	if ad.own != nil {
		au.own[id] = ad.own
		if !ad.own.deadlineAt.IsZero() {
			au.armDeadlineLocked(id, ad.own.deadlineAt)
		}
	}
}

// escalatedFrom lists the agents whose spawn id or one of its descendants
// asked for and the governor escalated (the via links into id's subtree).
func (au *Authority) escalatedFrom(id kin.AgentID) []kin.AgentID {
	au.mu.Lock()
	defer au.mu.Unlock()
	return au.escalatedFromLocked(id)
}

// escalatedFromLocked is escalatedFrom with au.mu held.
func (au *Authority) escalatedFromLocked(id kin.AgentID) []kin.AgentID {
	var out []kin.AgentID
	for e, asker := range au.via {
		if asker == id || au.lin.IsDescendant(asker, id) {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return out
}

// armDeadlineLocked stops id's subtree when its deadline passes.
func (au *Authority) armDeadlineLocked(id kin.AgentID, at time.Time) {
	if t := au.timers[id]; t != nil {
		t.Stop()
	}
	au.timers[id] = time.AfterFunc(max(time.Until(at), 0), func() {
		au.goExhaust(id, ReasonDeadline, fmt.Sprintf("the deadline of agent %d passed at %s", id, at.Format(time.RFC3339)))
	})
}

// goExhaust records that id's subtree ran out of budget or time and stops
// it (exhaustClaim, then its stop: grace, then kill, its partial results
// kept), all in the background, unless the authority is closed.
func (au *Authority) goExhaust(id kin.AgentID, reason, why string) {
	if !au.hold() {
		return
	}
	go func() {
		defer au.wg.Done()
		au.exhaustClaim(id, reason, why)()
	}()
}

// exhaustNow is goExhaust with the record and the claim made before it
// returns, and the stop itself in the background: a model call that
// crossed a cap is answered only once its agent's end, however soon it
// comes, is the stop's to record (budget_exhausted).
func (au *Authority) exhaustNow(id kin.AgentID, reason, why string) {
	if !au.hold() {
		return // nothing claimed: the shutdown stops the subtree
	}
	finish := au.exhaustClaim(id, reason, why)
	go func() {
		defer au.wg.Done()
		finish()
	}()
}

// hold counts one more piece of background work Close waits for (wg),
// unless the authority is closed (false).
func (au *Authority) hold() bool {
	au.mu.Lock()
	defer au.mu.Unlock()
	if au.closed {
		return false
	}
	au.wg.Add(1)
	return true
}

// exhaustClaim records that id's subtree ran out of budget or time and
// claims it for its stop; finish stops the claimed subtree (grace, then
// kill, its partial results kept: cancelTree copies them), then the
// agents escalated from it.
func (au *Authority) exhaustClaim(id kin.AgentID, reason, why string) (finish func()) {
	// An agent whose spawn id or one of its descendants asked for (seed
	// 002 §4.1) spends id's budget and lives under id's deadline without
	// being in id's subtree: it is stopped too, even when id has ended.
	escalated := func() {
		for _, e := range au.escalatedFrom(id) {
			au.goExhaust(e, reason, why)
		}
	}
	ctx := context.Background()
	a, err := au.st.AgentGetByID(ctx, id)
	if err != nil || a.State.Terminal() && a.Status == kin.StatusTerminated {
		return escalated
	}
	// Calls that crossed the cap together each ask for the stop: the
	// first to commit records it (its reason in the store and the cache
	// alike, one budget.exhausted event) and stops the subtree.
	already := false
	err = store.UpdateAfter(ctx, au.st, func(tx store.Tx, after *store.AfterCommit) error {
		already = false
		if chain, err := au.chainInTx(ctx, tx, id); err != nil {
			return err
		} else if len(chain) > 0 && chain[0].spend.exhausted != "" {
			already = true
			return nil
		}
		if err := tx.SpendSetExhausted(ctx, id, why); err != nil {
			return err
		}
		after.Do(func() {
			au.mu.Lock()
			au.rec(id).exhausted = why
			au.mu.Unlock()
		})
		return store.AppendEvent(ctx, tx, au.now(), kin.EventBudgetExhausted, id, a.Parent, kin.BudgetExhaustedData{Agent: id, Reason: reason, Detail: why})
	})
	if err != nil {
		au.log.Error("record exhausted budget", "agent", id, "err", err)
	} else if already {
		return escalated
	}
	au.log.Info("budget exhausted: stopping the subtree", "agent", id, "why", why)
	stop, err := au.stop(ctx, id, reason)
	if err != nil {
		au.log.Error("stop exhausted subtree", "agent", id, "err", err)
		return escalated
	}
	return func() {
		defer escalated()
		if err := stop(); err != nil {
			au.log.Error("stop exhausted subtree", "agent", id, "err", err)
		}
	}
}

// OwnPolicy is the policy an agent asked for itself, or nil. It never
// changes once stored: callers must not change it either.
func (au *Authority) OwnPolicy(id kin.AgentID) *kin.Policy {
	au.mu.Lock()
	defer au.mu.Unlock()
	if o := au.own[id]; o != nil {
		return o.policy
	}
	return nil
}

// Visibility is an agent's own consent to show or read workspaces (seed
// 003 §4; not inherited), or nil.
func (au *Authority) Visibility(id kin.AgentID) *kin.Visibility {
	if p := au.OwnPolicy(id); p != nil {
		return p.Visibility
	}
	return nil
}

// Policy returns an agent's requested and effective policy and spend.
func (au *Authority) Policy(ctx context.Context, id kin.AgentID) (*kin.AgentPolicy, error) {
	if _, err := au.agent(ctx, id); err != nil {
		return nil, err
	}
	layers, err := au.Layers(id)
	if err != nil {
		return nil, err
	}
	out := &kin.AgentPolicy{Agent: id, Stage: au.Stage(id), Effective: au.effective(id, layers)}
	au.mu.Lock()
	if o := au.own[id]; o != nil && o.policy != nil {
		p := *o.policy
		out.Requested = &p
	}
	out.Spend = au.spendLocked(id)
	au.mu.Unlock()
	return out, nil
}

// effective is the effective policy of id from its layers.
func (au *Authority) effective(id kin.AgentID, layers []kin.PolicyLayer) kin.EffectivePolicy {
	e := kin.EffectivePolicy{Layers: layers, Flat: policy.Flatten(layers)}
	if au.limits != nil {
		e.Limits = au.limits(e.Flat)
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, l := range au.chainLocked(id) {
		if o := l.own; o != nil && !o.deadlineAt.IsZero() && (e.DeadlineAt.IsZero() || o.deadlineAt.Before(e.DeadlineAt)) {
			e.DeadlineAt = o.deadlineAt
		}
	}
	return e
}

// spendOfLink is an agent's spend against the budget in force for its
// subtree: its own caps.
func spendOfLink(l permLink) kin.Spend {
	r := l.spend
	s := kin.Spend{Tokens: r.tokens, Cost: r.cost, SubtreeTokens: r.subTokens, SubtreeCost: r.subCost, SubtreeSpawns: r.spawns, Exhausted: r.exhausted}
	if o := l.own; o != nil {
		s.DeadlineAt = o.deadlineAt
		if o.policy != nil && o.policy.Budget != nil {
			b := o.policy.Budget
			s.MaxTokens, s.MaxCost, s.MaxDescendants = b.MaxTokens, b.MaxCost, b.MaxDescendants
		}
	}
	return s
}

// spendLocked is id's spend in the cache. perm.mu is held.
func (au *Authority) spendLocked(id kin.AgentID) kin.Spend {
	l := permLink{id: id, own: au.own[id]}
	if r := au.spend[id]; r != nil {
		l.spend = *r
	}
	return spendOfLink(l)
}

// SpendOf returns id's spend when it has a budget or has spent, else nil
// (for kin tree).
func (au *Authority) SpendOf(id kin.AgentID) *kin.Spend {
	au.mu.Lock()
	defer au.mu.Unlock()
	return au.spendOfLocked(id)
}

// SpendOfEach is SpendOf of each of ids, under the lock once (a tree's
// every node).
func (au *Authority) SpendOfEach(ids []kin.AgentID) []*kin.Spend {
	out := make([]*kin.Spend, len(ids))
	au.mu.Lock()
	defer au.mu.Unlock()
	for i, id := range ids {
		out[i] = au.spendOfLocked(id)
	}
	return out
}

// spendOfLocked is SpendOf's answer. au.mu is held.
func (au *Authority) spendOfLocked(id kin.AgentID) *kin.Spend {
	s := au.spendLocked(id)
	if s.SubtreeTokens == 0 && s.SubtreeCost == 0 && s.MaxTokens == nil && s.MaxCost == nil && s.MaxDescendants == nil && s.DeadlineAt.IsZero() && s.Exhausted == "" {
		return nil
	}
	// A copy of its own: returning &s moved s to the heap at its
	// declaration, for every agent of a tree, spend or none.
	out := s
	return &out
}

// agent returns one agent the caller may see.
func (au *Authority) agent(ctx context.Context, id kin.AgentID) (*kin.Agent, error) {
	if err := au.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	a, err := au.st.AgentGetByID(ctx, id)
	if err != nil {
		return nil, store.AgentError(err, id)
	}
	return a, nil
}

// authorize checks that the caller may act on target.
func (au *Authority) authorize(ctx context.Context, target kin.AgentID, self bool) error {
	return caller.MayActOn(ctx, target, self, au.lin.IsDescendant)
}

// Target is the agent a request is about: the caller for 0, checked to be
// the caller or in its subtree.
func (au *Authority) Target(ctx context.Context, id kin.AgentID, what string) (kin.AgentID, error) {
	c := caller.Of(ctx)
	if id == 0 {
		if c.Agent == 0 {
			if c.Refused != "" {
				return 0, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
			}
			return 0, kin.Errorf(kin.ECodeInvalid, "%s: name the agent (the operator is not an agent)", what)
		}
		return c.Agent, nil
	}
	if !au.lin.Has(id) {
		return 0, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	if err := au.authorize(ctx, id, true); err != nil {
		return 0, err
	}
	return id, nil
}

// Authorize decides whether an agent may use a tool now: its effective
// policy, and whether its subtree still has budget and time.
func (au *Authority) Authorize(ctx context.Context, req kin.AuthorizeRequest) (*kin.Decision, error) {
	id, err := au.Target(ctx, req.Agent, "authorize")
	if err != nil {
		return nil, err
	}
	if err := checkToolName(req.Tool); err != nil {
		return nil, err
	}
	if len(req.Input) > 0 && !json.Valid(req.Input) {
		return nil, kin.Errorf(kin.ECodeInvalid, "input is not valid JSON")
	}
	who, why := au.exhausted(id, au.now())
	var dec kin.Decision
	if why != "" {
		dec = kin.Decision{Reason: fmt.Sprintf("the budget of agent %d's subtree is exhausted: %s", who, why), Rule: "budget", Source: kin.SourcePolicy, Agent: who}
	} else {
		layers, err := au.Layers(id)
		if err != nil {
			return nil, err
		}
		dec, _ = policy.AllowTool(layers, req.Tool)
	}
	if !dec.Allowed {
		// A denial is recorded (tool_denied): that write is the agent's
		// report, limited like the others; an allowed call writes nothing.
		if err := au.quota.Allow(ctx, quota.Reports); err != nil {
			return nil, err
		}
		a, _ := au.st.AgentGetByID(ctx, id)
		parent := kin.AgentID(0)
		if a != nil {
			parent = a.Parent
		}
		err := store.UpdateAfter(ctx, au.st, func(tx store.Tx, _ *store.AfterCommit) error {
			return store.AppendEvent(ctx, tx, au.now(), kin.EventToolDenied, id, parent, kin.ToolDeniedData{Agent: id, Tool: req.Tool, Reason: dec.Reason})
		})
		if err != nil {
			return nil, store.KinError(err)
		}
	}
	return &dec, nil
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
func (au *Authority) Explain(ctx context.Context, req kin.ExplainRequest) (*kin.Explanation, error) {
	if (req.Tool == "") == (req.Path == "") {
		return nil, kin.Errorf(kin.ECodeInvalid, "explain needs exactly one of a tool or a path")
	}
	id, err := au.Target(ctx, req.Agent, "explain")
	if err != nil {
		return nil, err
	}
	layers, err := au.Layers(id)
	if err != nil {
		return nil, err
	}
	out := &kin.Explanation{Agent: id, Tool: req.Tool, Path: req.Path}
	if req.Tool != "" {
		if err := checkToolName(req.Tool); err != nil {
			return nil, err
		}
		out.Decision, out.Steps = policy.AllowTool(layers, req.Tool)
		if who, why := au.exhausted(id, au.now()); why != "" {
			out.Decision = kin.Decision{Reason: fmt.Sprintf("the budget of agent %d's subtree is exhausted: %s", who, why), Rule: "budget", Source: kin.SourcePolicy, Agent: who}
		}
		return out, nil
	}
	out.Mode, out.Decision, out.Steps = policy.PathMode(layers, req.Path)
	return out, nil
}

// Usage reports spend: it counts against the agent and every ancestor, and
// a subtree that reaches a cap is stopped.
func (au *Authority) Usage(ctx context.Context, req kin.UsageRequest) (*kin.Spend, error) {
	id, err := au.Target(ctx, req.Agent, "usage")
	if err != nil {
		return nil, err
	}
	if req.Tokens < 0 || req.Cost < 0 || math.IsNaN(req.Cost) || math.IsInf(req.Cost, 0) {
		return nil, kin.Errorf(kin.ECodeInvalid, "usage must be non-negative and finite (tokens %d, cost %v)", req.Tokens, req.Cost)
	}
	if req.Tokens == 0 && req.Cost == 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "usage reports nothing: give --tokens or --cost")
	}
	a, err := au.agent(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := au.quota.Allow(ctx, quota.Reports); err != nil {
		return nil, err
	}
	return au.addSpend(ctx, a, req.Tokens, req.Cost, kin.EventAgentUsage, kin.AgentUsageData{Agent: id, Tokens: req.Tokens, Cost: req.Cost}, false)
}

// addSpend adds tokens and cost to agent a's spend and to every subtree
// sum of its chain, and appends the event that says why (eventType with
// data), in one transaction: agent.usage for what an agent reported,
// model.call for what the model gateway metered. The caps are checked
// against the sums as the transaction left them, and the highest
// budgeted ancestor that reached one has its subtree stopped.
func (au *Authority) addSpend(ctx context.Context, a *kin.Agent, tokens int64, cost float64, eventType string, data any, lazy bool) (*kin.Spend, error) {
	id := a.ID
	var over []kin.AgentID
	var whys []string
	var s kin.Spend
	// fn is re-runnable (store.Deferrer): its writes go through tx, its
	// outputs are set afresh at each run, it reads only memory besides:
	// on PostgreSQL its SpendAdd goes with its chain's read.
	update := store.UpdateAfterDeferrable
	var known []kin.AgentID // the chain's ids when it is known to have no caps
	if lazy {
		update = store.UpdateAfterLazyDeferrable
		// A model call (lazy) whose chain is known to have no caps reads
		// no chain: nothing could be over a cap (uncapped), and its
		// sums are the store's own (SpendAdd). Usage reads it always: its
		// answer is the store's sums.
		au.mu.Lock()
		known = au.uncapped[id]
		au.mu.Unlock()
	}
	err := update(ctx, au.st, func(tx store.Tx, after *store.AfterCommit) error {
		over, whys, s = nil, nil, kin.Spend{}
		if tokens != 0 || cost != 0 {
			if err := tx.SpendAdd(ctx, id, tokens, cost); err != nil {
				return err
			}
		}
		if err := store.AppendEvent(ctx, tx, au.now(), eventType, id, a.Parent, data); err != nil {
			return err
		}
		if known != nil {
			after.Do(func() {
				au.mu.Lock()
				defer au.mu.Unlock()
				au.addSpendLocked(id, known, tokens, cost)
				s = au.spendLocked(id) // this host's view (the cache): the store's is not read
			})
			return nil
		}
		// The caps are checked against the sums as this transaction left
		// them: two reports that together reach a cap stop the subtree.
		if lazy {
			au.meterChains.Add(1)
		}
		chain, err := au.chainInTx(ctx, tx, id)
		if err != nil {
			return err
		}
		capped := false
		for _, l := range chain {
			if hasCaps(l.own) {
				capped = true
			}
			if l.spend.exhausted == "" {
				if why := overBudget(l.own, &l.spend); why != "" {
					over, whys = append(over, l.id), append(whys, why)
				}
			}
		}
		if len(chain) > 0 {
			s = spendOfLink(chain[0])
		}
		ids := make([]kin.AgentID, len(chain))
		for i, l := range chain {
			ids[i] = l.id
		}
		after.Do(func() {
			au.mu.Lock()
			defer au.mu.Unlock()
			au.addSpendLocked(id, ids, tokens, cost)
			if lazy && !capped && len(ids) > 0 {
				if len(au.uncapped) >= maxUncapped || au.uncapped == nil {
					au.uncapped = map[kin.AgentID][]kin.AgentID{}
				}
				au.uncapped[id] = ids
			}
		})
		return nil
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	// The highest exhausted ancestor's stop covers the rest (and the
	// agents escalated from its subtree: exhaust).
	if n := len(over); n > 0 {
		au.exhaustNow(over[n-1], ReasonBudget, whys[n-1])
		s.Exhausted = whys[n-1]
	}
	return &s, nil
}

// MeterChainReads is how many times a model call's metering read the
// agent's chain (runs of the transaction, retries included): the other
// calls' chains were known to have no caps (Authority.uncapped).
func (au *Authority) MeterChainReads() int64 { return au.meterChains.Load() }

// maxUncapped bounds Authority.uncapped (an entry is the ids of a chain).
const maxUncapped = 1 << 14

// addSpendLocked adds tokens and cost to id's spend in the cache and to
// the subtree sums of chain's ids (id's permission chain, id first), as
// a committed SpendAdd did in the store. au.mu is held.
func (au *Authority) addSpendLocked(id kin.AgentID, chain []kin.AgentID, tokens int64, cost float64) {
	r := au.rec(id)
	r.tokens += tokens
	r.cost += cost
	for _, c := range chain {
		cr := au.rec(c)
		cr.subTokens += tokens
		cr.subCost += cost
	}
}

// hasCaps says whether o's policy has a cap addSpend checks (overBudget):
// max_tokens or max_cost.
func hasCaps(o *permOwn) bool {
	if o == nil || o.policy == nil || o.policy.Budget == nil {
		return false
	}
	b := o.policy.Budget
	return b.MaxTokens != nil || b.MaxCost != nil
}

// ModelLimit is what agent id may still spend on a model call, as the
// model gateway asks before it forwards one (issue 25).
type ModelLimit struct {
	// Tokens is the least number of tokens any budgeted subtree of the
	// agent's chain has left (nil: no max_tokens binds it).
	Tokens *int64
	// Cost is the least max_cost left likewise (nil: none binds).
	Cost *float64
	// Price is the model's price in the operator's table; Priced false
	// when it has none (its calls cost 0).
	Price  policy.ModelPrice
	Priced bool
}

// ModelAdmitter admits one request's models against an agent's chain as
// it stood when the gate was made (ModelGate).
type ModelAdmitter interface {
	// Admit decides whether the agent may call model now.
	Admit(model string) (*ModelLimit, error)
	// Exhausted is the budget_exhausted refusal every model gets when the
	// agent's subtree or an ancestor's has spent its budget or passed its
	// deadline, nil otherwise.
	Exhausted() error
}

// modelGate is agent id's chain read once (from the cache) for the models
// one request names: the model asked for and the one the upstream gets,
// or every model of a list. Its layers are made at the first Admit that
// needs them.
type modelGate struct {
	au     *Authority
	id     kin.AgentID
	chain  []permLink
	budget error // the chain's budget is exhausted or its deadline passed
	layers []kin.PolicyLayer
	err    error // making the layers failed
	made   bool
	rem    policy.Remaining
}

// ModelGate reads agent id's chain once for the models of one request:
// Admit them against it. not_found when the agent is unknown.
func (au *Authority) ModelGate(id kin.AgentID) (ModelAdmitter, error) {
	au.mu.Lock()
	chain := au.chainLocked(id)
	au.mu.Unlock()
	if len(chain) == 0 {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	g := &modelGate{au: au, id: id, chain: chain}
	if who, why := exhaustedOf(chain, au.now()); why != "" {
		g.budget = kin.Errorf(kin.ECodeBudget, "the budget of agent %d's subtree is exhausted: %s", who, why)
	}
	return g, nil
}

// Admit decides whether the gate's agent may call model now: refused with
// budget_exhausted when its subtree or an ancestor's has spent its budget
// or passed its deadline, with permission_denied when its effective
// policy's models lists do not allow the model, or when the model has no
// price while a max_cost binds the agent (its calls could not be counted
// against it). It reads the cache: calls that race past a cap together
// each finish, and the next is refused.
func (g *modelGate) Admit(model string) (*ModelLimit, error) {
	if g.budget != nil {
		return nil, g.budget
	}
	if !g.made {
		g.made = true
		g.layers, g.err = g.au.layersOf(g.chain, nil)
		g.rem = remainingOf(g.chain)
	}
	if g.err != nil {
		return nil, g.err
	}
	if dec := policy.AllowModel(g.layers, model); !dec.Allowed {
		return nil, kin.Errorf(kin.ECodeDenied, "%s", dec.Reason)
	}
	lim := &ModelLimit{Tokens: g.rem.Tokens, Cost: g.rem.Cost}
	lim.Price, lim.Priced = g.au.cfg.Price(model)
	if g.rem.Cost != nil && !lim.Priced {
		return nil, kin.Errorf(kin.ECodeDenied, "model %q has no price in kin's price table (the policy config's prices), and a max_cost binds agent %d: its calls could not be counted", model, g.id)
	}
	return lim, nil
}

// Exhausted is the gate's budget refusal (ModelAdmitter).
func (g *modelGate) Exhausted() error { return g.budget }

// ModelCall records one call agent id made through the model gateway:
// its tokens and cost added to the agent's spend and every ancestor's
// subtree sum with a model.call event, in one transaction (addSpend, as
// Usage). A subtree that reaches a cap is stopped. When the agent's chain
// is known to have no caps (Authority.uncapped) the chain is not read and
// the Spend returned is this host's cache's (the gateway ignores it).
func (au *Authority) ModelCall(ctx context.Context, call kin.ModelCallData) (*kin.Spend, error) {
	if call.Tokens < 0 || call.Cost < 0 || math.IsNaN(call.Cost) || math.IsInf(call.Cost, 0) {
		return nil, kin.Errorf(kin.ECodeInvalid, "a model call's usage must be non-negative and finite (tokens %d, cost %v)", call.Tokens, call.Cost)
	}
	// The gateway authenticated the agent; its parent is the lineage's.
	if !au.lin.Has(call.Agent) {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", call.Agent)
	}
	a := &kin.Agent{ID: call.Agent, Parent: au.lin.Parent(call.Agent)}
	// Lazily durable (store.LazyUpdater): committed and visible, so the
	// agent's next call and every check see it, when this returns; only a
	// crash of the machine (not of the daemon) in the next moments may
	// lose it. A durable commit per call would add a disk flush to every
	// model call (before it the gateway added about 1.5 ms a call on SQLite: docs/PERFORMANCE.md).
	return au.addSpend(ctx, a, call.Tokens, call.Cost, kin.EventModelCall, call, true)
}

// Promote changes an agent's stage; only its parent or the operator may,
// never the agent itself, and never beyond the parent's effective policy.
func (au *Authority) Promote(ctx context.Context, req kin.PromoteRequest) (*kin.Agent, error) {
	a, err := au.agent(ctx, req.Agent)
	if err != nil {
		return nil, err
	}
	c := caller.Of(ctx)
	switch {
	case c.Refused != "":
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	case c.Agent == a.ID:
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not promote itself: only its parent or the operator may", a.ID)
	case !c.Operator() && c.Agent != a.Parent:
		return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may not promote agent %d: only its parent (%d) or the operator may", c.Agent, a.ID, a.Parent)
	}
	if req.Stage == "" {
		return nil, kin.Errorf(kin.ECodeInvalid, "stage is empty: name the stage (%s)", strings.Join(presetNames(au.cfg), ", "))
	}
	pr, err := au.cfg.Preset(req.Stage)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "stage: %v", err)
	}
	if err := au.quota.Allow(ctx, quota.Reports); err != nil {
		return nil, err
	}
	err = store.UpdateAfter(ctx, au.st, func(tx store.Tx, after *store.AfterCommit) error {
		now := au.now()
		chain, err := au.chainInTx(ctx, tx, a.ID)
		if err != nil {
			return err
		}
		if len(chain) == 0 {
			return kin.Errorf(kin.ECodeNotFound, "agent %d not found", a.ID)
		}
		if a.Parent != 0 {
			parentLayers, err := au.layersOf(chain[1:], nil)
			if err != nil {
				return err
			}
			if excess := policy.Exceeds(withoutGlobal(parentLayers), policy.Remaining{}, now, kin.Policy{}, &pr); len(excess) > 0 {
				return kin.Escalationf(excess, "stage %q gives more than agent %d has:\n%s", req.Stage, a.Parent, policy.FormatExcess(excess))
			}
		}
		if err := tx.AgentUpdate(ctx, store.AgentUpdateParams{ID: a.ID, At: now, Stage: &req.Stage}); err != nil {
			return err
		}
		from := ""
		if o := chain[0].own; o != nil {
			from = o.stage
		}
		if err := store.AppendEvent(ctx, tx, now, kin.EventAgentPromoted, a.ID, a.Parent, kin.AgentPromotedData{Agent: a.ID, From: from, To: req.Stage, By: c.CreatedBy()}); err != nil {
			return err
		}
		after.Do(func() {
			au.mu.Lock()
			defer au.mu.Unlock()
			if o := au.own[a.ID]; o != nil {
				c := *o // readers may hold the old one
				c.stage = req.Stage
				au.own[a.ID] = &c
			} else {
				au.own[a.ID] = &permOwn{stage: req.Stage}
			}
		})
		return nil
	})
	if err != nil {
		if kin.ErrorCodeOf(err) != kin.ECodeInternal {
			return nil, err
		}
		return nil, store.KinError(err)
	}
	return au.agent(ctx, a.ID)
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

// Control is what an agent's control files and handoff show of its
// effective policy: the flattened policy as one line of JSON, the mounts
// as JSON and as "path mode" lines.
func (au *Authority) Control(id kin.AgentID) (flatJSON, mountsJSON []byte, lines []string) {
	layers, err := au.Layers(id)
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

// Flat is id's effective policy flattened, and false when no agent
// in its chain has a policy or stage (the common case, answered without
// building layers: the global deny list, tools only, changes nothing that
// is flattened). The background writer asks it for every agent it touches.
func (au *Authority) Flat(id kin.AgentID) (kin.Policy, bool) {
	au.mu.Lock()
	defer au.mu.Unlock()
	if len(au.own) == 0 {
		return kin.Policy{}, false
	}
	chain := au.chainLocked(id)
	if !slices.ContainsFunc(chain, func(l permLink) bool { return l.own != nil }) {
		return kin.Policy{}, false
	}
	layers, err := au.layersOf(chain, nil)
	if err != nil {
		return kin.Policy{}, false
	}
	return policy.Flatten(layers), true
}

// LoadPolicyConfig reads the operator's policy configuration, or ships the
// defaults for "".
func LoadPolicyConfig(path string) (policy.Config, error) {
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
