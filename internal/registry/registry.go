package registry

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/personserver"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Registry is the lineage registry (seed 000) and the governor's rules
// (seed 002): it answers kin.RegistryService but Status (the daemon's), and
// registers every agent, spawned ones too (RegisterSpawn), with the
// governor's checks and the authority's admission inside the registration's
// transaction.
type Registry struct {
	st      store.Store
	lin     *lineage.Tree
	auth    *authority.Authority
	ps      *personserver.Server
	run     Runner
	obs     Observer
	clock   func() time.Time
	closing <-chan struct{}
	wait    func() <-chan struct{}
	quota   *quota.Limiter

	defaultResponsible string
	host               string // this daemon's host in the fleet, recorded on every agent it registers

	// followed is the event log's seq FollowStore applied up to (CatchUp
	// reads from there); -1 while it does not run.
	followed atomic.Int64
	// followLog is FollowStore's logger (nil until it runs), for the
	// registrations CatchUp learns of.
	followLog atomic.Pointer[slog.Logger]
	// followHold, held, keeps FollowStore from applying (HoldFollowing).
	followHold sync.RWMutex

	mu            sync.Mutex // guards profile, overrides and settings
	profile       kin.Profile
	profileSource string
	baseProfile   kin.Profile
	overrides     map[string]string
	settings      map[string]string // the stored settings profile was made from
}

// Runner is what the registry needs of the part of kin that runs agents.
type Runner interface {
	// Running reports whether this daemon runs agent id's process now;
	// after a restart, once it has checked (waiting for that).
	Running(ctx context.Context, id kin.AgentID) (bool, error)
	// Reconciling reports whether a restarted daemon has not yet checked
	// agent id's process (kin.Agent.Reconciling).
	Reconciling(id kin.AgentID) bool
	// Terminate stops a running agent and its owned subtree; the agent's
	// final state is terminated.
	Terminate(ctx context.Context, id kin.AgentID) error
	// Freeze freezes (or thaws) the processes of the agents a suspend (or
	// resume) changed, and records their state.
	Freeze(ctx context.Context, req kin.StatusRequest, changed []*kin.Agent) error
	// CheckRequest validates what a registration asks beyond the
	// registry's own fields (its policy, stage and template) before its
	// transaction, and returns the files its policy's mounts name.
	CheckRequest(req *kin.RegisterRequest) (map[string]authority.FileID, error)
	// CheckAgentUID refuses an agent id the home's uid range cannot run.
	CheckAgentUID(id kin.AgentID) error
	// SandboxAvailable says why an agent that needs the sandbox shim
	// cannot have it here (nil: it can).
	SandboxAvailable() error
	// Provision fills a new agent's workspace from its template.
	Provision(ctx context.Context, a *kin.Agent, t *kin.Template) error
}

// Observer is told of registrations: metrics and traces.
type Observer interface {
	// Refused is told of a registration the governor or the authority
	// refused.
	Refused(err error)
	// Admitted is told of a committed registration: spawn is what a spawn
	// stored beside it, nil for a plain registration.
	Admitted(spawn *SpawnExtra)
	// TraceBegan is when a plain registration began; Traced records its
	// span (a is nil when it was refused).
	TraceBegan() time.Time
	Traced(ctx context.Context, req kin.RegisterRequest, a *kin.Agent, began time.Time, err error)
}

// Config is what a Registry is built from.
type Config struct {
	Store     store.Store
	Lineage   *lineage.Tree
	Authority *authority.Authority
	Identity  *personserver.Server
	Runner    Runner
	Observer  Observer
	Clock     func() time.Time
	// Profile is the governor's profile as shipped or loaded, before the
	// operator's stored settings; ProfileSource says where it came from.
	Profile       kin.Profile
	ProfileSource string
	// DefaultResponsible answers for a root agent nobody named.
	DefaultResponsible string
	// Closing ends event streams; Wait returns a channel closed at the
	// next commit with events.
	Closing <-chan struct{}
	Wait    func() <-chan struct{}
	// Quota limits how often an agent changes its descendants' status
	// (nil: no limit).
	Quota *quota.Limiter
	// Host is this daemon's host in the fleet: every agent it registers
	// is recorded as its.
	Host string
}

// New makes a Registry and reads the governor's stored settings.
func New(ctx context.Context, c Config) (*Registry, error) {
	r := &Registry{st: c.Store, lin: c.Lineage, auth: c.Authority, ps: c.Identity, run: c.Runner, obs: c.Observer,
		clock: c.Clock, closing: c.Closing, wait: c.Wait, quota: c.Quota, defaultResponsible: c.DefaultResponsible, host: c.Host,
		baseProfile: c.Profile, profileSource: c.ProfileSource}
	r.followed.Store(-1)
	if err := r.loadGovernor(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) now() time.Time { return r.clock() }

// authorize checks that the caller may act on target.
func (r *Registry) authorize(ctx context.Context, target kin.AgentID, self bool) error {
	return caller.MayActOn(ctx, target, self, r.lin.IsDescendant)
}

// Register adds an agent under the governor's rules, checked in the same
// transaction as the insert.
func (r *Registry) Register(ctx context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	began := r.obs.TraceBegan()
	a, _, err := r.register(ctx, req, nil, false)
	r.obs.Traced(ctx, req, a, began, err)
	return a, err
}

// RegisterSpawn registers an agent that is to be spawned: what it runs is
// stored with it, in the same transaction. The caller traces it.
func (r *Registry) RegisterSpawn(ctx context.Context, req kin.RegisterRequest, spawn SpawnExtra) (*kin.Agent, error) {
	a, _, err := r.register(ctx, req, &spawn, false)
	return a, err
}

// RegisterSpawnEarly is RegisterSpawn, except that it may return once the
// registration is committed and visible, before it is on the disk
// (store.EarlyDeferrer): durable waits until it is. What must follow the
// record's durability (the agent's process) waits for durable; a refusal
// or an error is returned once durable, with durable nil.
func (r *Registry) RegisterSpawnEarly(ctx context.Context, req kin.RegisterRequest, spawn SpawnExtra) (a *kin.Agent, durable func() error, err error) {
	return r.register(ctx, req, &spawn, true)
}

// SpawnExtra is what a spawn stores beside the registration.
type SpawnExtra struct {
	Command  []string
	Env      []string // the spawner's KEY=VALUE additions
	Dir      string
	Restart  kin.RestartPolicy
	Grace    kin.Duration
	Replaces kin.AgentID // the agent it restarts, or 0
	// RequestedBy is, for the replacement of an agent whose spawn was
	// escalated (seed 002 §4.1), the agent that asked for that one: the
	// replacement is held to the same asker's chain (and records it), or
	// a crash would hand the asker's command its parent's rights.
	RequestedBy kin.AgentID
	Handoff     []byte // JSON of a validated kin.Handoff, or nil
	// Host is the host of the fleet asked to run it (kin.SpawnRequest.Host);
	// "": the default placement (placeHost).
	Host string
	// InTx, when not nil, writes what the spawn keeps beside the agent in
	// the registration's own transaction (its key's row): one durable
	// commit for both. An error from it undoes the registration. The agent
	// it is given names the host it was placed on.
	InTx func(ctx context.Context, tx store.Tx, a *kin.Agent) error
}

// register validates, authorizes and inserts an agent (and its process spec
// for a spawn) with its events, the governor's rules checked in the same
// transaction, and adds it to the in-memory lineage once committed. early:
// it may return once committed and visible, with durable (RegisterSpawnEarly);
// otherwise durable is nil.
func (r *Registry) register(ctx context.Context, req kin.RegisterRequest, extra *SpawnExtra, early bool) (_ *kin.Agent, durable func() error, _ error) {
	c := caller.Of(ctx)
	if c.Refused != "" {
		return nil, nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	if req.Parent == 0 && c.Agent != 0 {
		req.Parent = c.Agent // inside an agent, a spawn is a child of the caller
	}
	if req.Parent == 0 && req.Responsible == "" {
		req.Responsible = r.defaultResponsible // the operator answers for a root nobody named
	}
	if err := req.Validate(); err != nil {
		return nil, nil, err
	}
	if req.Parent == 0 {
		if err := caller.OperatorOnly(ctx, "register root agents"); err != nil {
			return nil, nil, err
		}
	} else if err := r.authorize(ctx, req.Parent, true); err != nil {
		return nil, nil, err
	}
	name, _ := kin.ParseName(req.Name) // validated above
	if req.Life == "" {
		req.Life = kin.LifeOwned
	}
	mountIDs, err := r.run.CheckRequest(&req)
	if err != nil {
		return nil, nil, err
	}
	by := c.CreatedBy()
	var out *kin.Agent
	var refused *kin.Error
	var denied error
	var ad *authority.Admission
	charged := false // the caller's reports quota, for a recorded refusal
	// Re-runnable (store.Deferrer): its outputs are set afresh at each
	// run, its effects are tx's and after's, and the quota is charged once
	// however often it runs. On PostgreSQL the insert then rides with the
	// next statement, and a name taken meanwhile runs it again.
	update := func(tx store.Tx, after *store.AfterCommit) error {
		out, refused, denied, ad = nil, nil, nil, nil
		now := r.now()
		prof, err := r.governorInTx(ctx, tx)
		if err != nil {
			return err
		}
		// refuse answers with a rule's refusal; one of the governor's
		// rules is recorded (an event, a row): it is one of the caller's
		// reports, and past its quota it is refused with nothing written.
		// Charged once, however often the transaction runs.
		refuse := func(rf *kin.Error, facts governor.SpawnFacts) error {
			refused = rf
			if !governor.IsRuleCode(refused.Code) {
				return nil
			}
			if !charged {
				if err := r.quota.Allow(ctx, quota.Reports); err != nil {
					if !errors.As(err, &refused) {
						return err
					}
					return nil
				}
				charged = true
			}
			return r.recordRejection(ctx, tx, prof, req, facts, refused, by)
		}
		facts := governor.SpawnFacts{ParentID: req.Parent, Name: name, Life: req.Life, Now: now}
		// The parent and its chain with the budget counters, in one read:
		// the governor's facts and the authority's.
		var parentChain []store.PermRow
		if req.Parent != 0 {
			if parentChain, err = tx.PermChain(ctx, req.Parent); err != nil {
				return err
			}
			if len(parentChain) > 0 {
				facts.Parent = parentChain[0].Agent
			}
		}
		facts.Role = governor.Role(prof, req.Role, name)
		// Seed 002 §4.1: a role that escalates the child's role asks its
		// nearest ancestor that spawns it, whose child it becomes; every
		// rule below is that ancestor's. Its chain came in the read above.
		var asker *kin.Agent
		if facts.Parent != nil && governor.Escalates(prof, facts.Parent.Role, facts.Role) {
			asker = facts.Parent
			target, refusal, err := r.escalationTarget(ctx, tx, prof, facts, parentChain)
			if err != nil {
				return err
			}
			if refusal != nil {
				return refuse(refusal, facts)
			}
			facts.ParentID, facts.Parent = target.ID, target
		} else if extra != nil && extra.RequestedBy != 0 {
			// A replacement keeps its asker's chain, though the asker
			// asks nothing now (it may have ended: its layers stay).
			chain, err := tx.PermChain(ctx, extra.RequestedBy)
			if err != nil {
				return err
			}
			if len(chain) == 0 {
				return kin.Errorf(kin.ECodeNotFound, "agent %d, which asked for the agent being replaced, is not found", extra.RequestedBy)
			}
			asker, parentChain = chain[0].Agent, chain
		}
		// Where it runs: this host, or for a spawn another host of the
		// fleet, checked here, under the write lock, to hold a live lease.
		facts.Host = r.host
		if extra != nil {
			placeBy := facts.Parent
			if asker != nil {
				placeBy = asker // beside the one that asked, as its own child would be
			}
			facts.Host = r.placeHost(extra.Host, placeBy)
		}
		placed := facts.Host != r.host
		if placed {
			if refused = r.checkPlacement(ctx, tx, facts.Host, &req, now); refused != nil {
				return nil
			}
		}
		needs := governor.NeedsFor(prof, facts.Role, facts.Parent != nil)
		if needs.LiveChildren {
			if facts.LiveChildren, err = tx.AgentCountLive(ctx, store.AgentCountLiveParams{Parent: facts.ParentID, HasParent: true}); err != nil {
				return err
			}
		}
		facts.LiveSameRole, err = slotHolders(ctx, tx, needs.Cardinality, facts.Role, name.Context, facts.Host, 0)
		if err != nil {
			return err
		}
		if req.Wallet != "" {
			if facts.WalletTaken, err = tx.AgentWalletExists(ctx, req.Wallet); err != nil {
				return err
			}
		}
		if rf := governor.CheckSpawn(prof, facts); rf != nil {
			return refuse(rf, facts)
		}
		var env []string
		if extra != nil {
			env = extra.Env
		}
		// An escalated spawn is admitted against its asker's chain, which
		// holds the new parent's: it never gets more than either has.
		if ad, denied = r.auth.Admit(ctx, tx, &req, parentChain, mountIDs, facts.Role, env, now); denied != nil {
			if kin.ErrorCodeOf(denied) == kin.ECodeInternal {
				err, denied = denied, nil
				return err // the store failed: nothing is decided
			}
			return nil
		}
		if asker != nil {
			ad.Via = asker.ID
		}
		if extra != nil && ad.NeedsSandbox() {
			if denied = r.run.SandboxAvailable(); denied != nil {
				return nil
			}
		}
		a := kin.Agent{
			Stage:            req.Stage,
			Name:             req.Name,
			Role:             facts.Role,
			Parent:           facts.ParentID,
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
			Host:             facts.Host,
		}
		if asker != nil {
			a.RequestedBy = asker.ID
		}
		if a.Responsible == "" && facts.Parent != nil {
			a.Responsible = facts.Parent.Responsible // seed 000: children inherit by default
		}
		ins := store.AgentInsertParams{Agent: a, NameContext: name.Context, Policy: ad.Policy, DeadlineAt: ad.DeadlineAt}
		if extra != nil {
			ins.Agent.Command, ins.Agent.Restart, ins.Agent.Grace, ins.Agent.Replaces = extra.Command, extra.Restart, extra.Grace, extra.Replaces
			ins.Env, ins.Dir, ins.Handoff = extra.Env, extra.Dir, extra.Handoff
		}
		// A live agent's name is unique: the store's unique index decides,
		// in the insert (no read of its own: one statement fewer per
		// registration, a round trip on PostgreSQL).
		out, err = tx.AgentInsert(ctx, ins)
		if errors.Is(err, store.ErrNameTaken) {
			out, refused = nil, nameTaken(req.Name)
			return errRefusedInTx // undoes what Admit wrote; refused answers
		}
		if err != nil {
			return err
		}
		if !placed { // a placed agent's uid is its host's to check, at its start
			if err := r.run.CheckAgentUID(out.ID); err != nil {
				return err // rolls the insert back
			}
		}
		if err := tx.SpendSpawnAdd(ctx, ad.Counted); err != nil {
			return err
		}
		if extra != nil && extra.InTx != nil {
			if err := extra.InTx(ctx, tx, out); err != nil {
				return err
			}
		}
		after.Do(func() {
			r.lin.Add(out.ID, out.Parent)
			r.auth.Admitted(out.ID, ad)
		})
		if err := store.AppendEvent(ctx, tx, now, kin.EventAgentRegistered, out.ID, out.Parent, kin.AgentRegisteredData{
			Agent: out.ID, Name: out.Name, Role: out.Role, Creator: by, Responsible: out.Responsible,
			Parent: out.Parent, Generation: out.Generation, Life: out.Life, Replaces: out.Replaces,
		}); err != nil {
			return err
		}
		if out.Parent != 0 {
			if err := store.AppendEvent(ctx, tx, now, kin.EventChildSpawned, out.ID, out.Parent, kin.ChildSpawnedData{
				Parent: out.Parent, Child: out.ID, Generation: out.Generation,
			}); err != nil {
				return err
			}
		}
		if asker != nil {
			if err := store.AppendEvent(ctx, tx, now, kin.EventSpawnEscalated, out.ID, out.Parent, kin.SpawnEscalatedData{
				RequestedBy: asker.ID, Parent: out.Parent, Child: out.ID, Role: out.Role,
			}); err != nil {
				return err
			}
		}
		if placed {
			// The placed host learns of it from the log (its follower);
			// what it runs is in the agent's row, not in the event.
			return store.AppendEvent(ctx, tx, now, kin.EventSpawnPlaced, out.ID, out.Parent, kin.SpawnPlacedData{
				Agent: out.ID, Parent: out.Parent, Host: out.Host, By: r.host,
			})
		}
		return nil
	}
	if early {
		durable, err = store.UpdateAfterEarlyDeferrable(ctx, r.st, update)
	} else {
		err = store.UpdateAfterDeferrable(ctx, r.st, update)
	}
	if errors.Is(err, errRefusedInTx) {
		err = nil
	}
	if err != nil {
		return nil, nil, store.KinError(err)
	}
	if durable != nil && (refused != nil || denied != nil) {
		// A refusal recorded: answered once on the disk, as ever.
		if err := durable(); err != nil {
			return nil, nil, store.KinError(err)
		}
		durable = nil
	}
	if refused != nil {
		r.obs.Refused(refused)
		return nil, nil, refused
	}
	if denied != nil {
		r.obs.Refused(denied)
		return nil, nil, denied
	}
	r.obs.Admitted(extra)
	if req.Template != nil {
		if err := r.run.Provision(ctx, out, req.Template); err != nil {
			if durable != nil {
				// Answered once on the disk, as a refusal is; a failed
				// sync is said beside the provisioning's error.
				if derr := durable(); derr != nil {
					err = errors.Join(err, store.KinError(derr))
				}
			}
			return out, nil, err
		}
	}
	return out, durable, nil
}

// slotHolders counts the agents that hold the cardinality slot a role
// rule gives (singleton: one for the fleet; per_context: one per name
// context; per_host: one per host of the fleet, host being the one the
// agent is placed on), leaving out except. An agent the fleet can no
// longer account for (offline: its host's lease expired, or its heartbeats
// stopped) holds no slot: seed 002's GO is a lease-renewed singleton, which a replacement
// may take over once the lease has run out, and never before.
func slotHolders(ctx context.Context, tx store.Tx, card kin.Cardinality, role, nameContext, host string, except kin.AgentID) (int, error) {
	p := store.AgentCountLiveParams{Role: role, Accountable: true, Except: except}
	switch card {
	case kin.CardinalitySingleton:
	case kin.CardinalityPerContext:
		p.NameContext = &nameContext
	case kin.CardinalityPerHost:
		p.Host = &host
	default:
		return 0, nil
	}
	return tx.AgentCountLive(ctx, p)
}

// escalationTarget is the agent an escalated spawn is placed under (seed
// 002 §4.1): the asker's nearest ancestor whose role spawns the child's,
// read in the registration's transaction (the asker's chain came with the
// registration's first read; the target's whole row is one more, only for
// an escalation). The asker itself must be able to spawn: active, and its
// own circuit breaker closed.
func (r *Registry) escalationTarget(ctx context.Context, tx store.Tx, prof kin.Profile, f governor.SpawnFacts, chain []store.PermRow) (*kin.Agent, *kin.Error, error) {
	if rf := governor.CheckAsker(prof, f.Parent, f.Now); rf != nil {
		return nil, rf, nil
	}
	// The lineage ancestors of the asker: its chain, less the links an
	// escalation of its own put in it (those are not its ancestors).
	var roles []string
	var ids []kin.AgentID
	for i := 0; i < len(chain); i++ {
		l := chain[i]
		if i > 0 {
			roles, ids = append(roles, l.Role), append(ids, l.ID)
		}
		if l.RequestedBy != 0 {
			// Skip to l's parent: the links between are its asker's.
			for i+1 < len(chain) && chain[i+1].ID != l.Parent {
				i++
			}
		}
	}
	idx, rf := governor.EscalationTarget(prof, f.Parent.Role, f.Role, roles)
	if rf != nil {
		return nil, rf, nil
	}
	target, err := tx.AgentGetByID(ctx, ids[idx])
	if err != nil {
		return nil, nil, err
	}
	return target, nil, nil
}

// errRefusedInTx undoes a registration's transaction whose refusal was
// found by a write (the insert's unique name): the refusal is the answer.
var errRefusedInTx = errors.New("registry: refused in the transaction")

// nameTaken is the refusal of a name a live agent holds.
func nameTaken(name string) *kin.Error {
	return kin.Errorf(kin.ECodeConflict, "name %q is taken by a live agent (names are unique among agents that are not terminated)", name)
}

// placeHost is the host a spawn runs on: the one asked for; else its
// parent's when the parent is an agent running on a host of the fleet (a
// child runs beside its parent unless told otherwise); else this host, the
// one that received the request.
func (r *Registry) placeHost(asked string, parent *kin.Agent) string {
	switch {
	case asked != "":
		return asked
	case r.host != "" && parent != nil && parent.Host != "" && parent.Running():
		return parent.Host
	}
	return r.host
}

// checkPlacement refuses to place an agent on host (not this one) unless
// it is a host of the fleet whose lease runs at now, read in the
// registration's transaction, and unless the request names files that
// only this host checked (a policy's mounts, a template).
func (r *Registry) checkPlacement(ctx context.Context, tx store.Tx, host string, req *kin.RegisterRequest, now time.Time) *kin.Error {
	if r.host == "" {
		return kin.Errorf(kin.ECodeInvalid, "this daemon is not a host of a fleet: it cannot place an agent on host %q", host)
	}
	hosts, err := tx.HostList(ctx)
	if err != nil {
		return kin.Errorf(kin.ECodeInternal, "read the fleet's hosts: %v", err)
	}
	var names []string
	for _, h := range hosts {
		if h.Name != host {
			names = append(names, h.Name)
			continue
		}
		switch {
		case h.LeaseUntil.IsZero():
			return kin.Errorf(kin.ECodeUnavailable, "host %q is down: its daemon stopped (its lease was released at %s); nothing was started or registered",
				host, h.RenewedAt.UTC().Format(time.RFC3339))
		case !h.Live(now):
			return kin.Errorf(kin.ECodeUnavailable, "host %q is down: its lease expired at %s (its daemon died or lost the store); nothing was started or registered",
				host, h.LeaseUntil.UTC().Format(time.RFC3339))
		}
		if req.Policy != nil && req.Policy.Mounts != nil {
			return kin.Errorf(kin.ECodeInvalid, "the policy's mounts name files on host %q, which host %q cannot check: spawn the agent through %s's own API", r.host, host, host)
		}
		if req.Template != nil {
			return kin.Errorf(kin.ECodeInvalid, "a template provisions the workspace on the host that receives the spawn (%q), not on %q: spawn the agent through %s's own API", r.host, host, host)
		}
		return nil
	}
	slices.Sort(names)
	known := strings.Join(names, ", ")
	if known == "" {
		known = "none but " + r.host
	} else if !slices.Contains(names, r.host) {
		known += ", " + r.host
	}
	return kin.Errorf(kin.ECodeInvalid, "host %q is not a host of the fleet (its hosts: %s)", host, known)
}

// recordRejection writes seed 002's alert to the parent and runs the circuit
// breaker, in the rejected request's own transaction.
func (r *Registry) recordRejection(ctx context.Context, tx store.Tx, prof kin.Profile, req kin.RegisterRequest, f governor.SpawnFacts, refused *kin.Error, by string) error {
	now := f.Now
	if err := store.AppendEvent(ctx, tx, now, kin.EventSpawnRejected, 0, req.Parent, kin.SpawnRejectedData{
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
	return store.AppendEvent(ctx, tx, now, kin.EventCircuitOpen, req.Parent, 0, kin.CircuitOpenData{
		Agent: req.Parent, Rejections: recent, Window: cb.Window, Until: until,
	})
}

// Agent returns one agent.
func (r *Registry) Agent(ctx context.Context, id kin.AgentID) (*kin.Agent, error) {
	if err := r.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	a, err := r.st.AgentGetByID(ctx, id)
	if err != nil {
		return nil, store.AgentError(err, id)
	}
	r.markReconciling(a)
	return a, nil
}

// markReconciling sets Reconciling on the agents whose processes a
// restarted daemon has not yet checked.
func (r *Registry) markReconciling(as ...*kin.Agent) {
	for _, a := range as {
		a.Reconciling = a.Running() && r.run.Reconciling(a.ID)
	}
}

// Agents lists agents.
func (r *Registry) Agents(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error) {
	if c := caller.Of(ctx); c.Refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
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
	out, err := r.st.AgentList(ctx, f)
	if err != nil {
		return nil, store.KinError(err)
	}
	if c := caller.Of(ctx); !c.Operator() {
		// An agent sees itself and its descendants only.
		mine := out[:0]
		for _, a := range out {
			if r.authorize(ctx, a.ID, true) == nil {
				mine = append(mine, a)
			}
		}
		out = mine
	}
	r.markReconciling(out...)
	return nonNil(out), nil
}

// Children lists an agent's direct children.
func (r *Registry) Children(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	if _, err := r.Agent(ctx, id); err != nil {
		return nil, err
	}
	return r.Agents(ctx, kin.AgentFilter{Parent: id, HasParent: true})
}

// Ancestors returns the responsibility chain, the agent first.
func (r *Registry) Ancestors(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error) {
	if err := r.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	out, err := r.st.AgentAncestors(ctx, id)
	if err != nil {
		return nil, store.AgentError(err, id)
	}
	r.markReconciling(out...)
	return out, nil
}

// Tree returns the subtree at id, or the whole forest for id 0. The shape
// comes from the in-memory lineage; the rows from the store.
func (r *Registry) Tree(ctx context.Context, id kin.AgentID) ([]*kin.TreeNode, error) {
	ids, id, err := r.treeIDs(ctx, id)
	if err != nil {
		return nil, err
	}
	agents, err := r.st.AgentListByIDs(ctx, ids)
	if err != nil {
		return nil, store.AgentError(err, id)
	}
	r.markReconciling(agents...)
	trees := BuildTree(agents, id)
	nodes := make([]*kin.TreeNode, 0, len(agents))
	var walk func(ns []*kin.TreeNode)
	walk = func(ns []*kin.TreeNode) {
		for _, n := range ns {
			nodes = append(nodes, n)
			walk(n.Children)
		}
	}
	walk(trees)
	inOrder := make([]kin.AgentID, len(nodes))
	for i, n := range nodes {
		inOrder[i] = n.ID
	}
	for i, s := range r.auth.SpendOfEach(inOrder) {
		nodes[i].Spend = s
	}
	return trees, nil
}

// subtreeOf is the ids of agent id's subtree (id first), once the caller
// may read it.
func (r *Registry) subtreeOf(ctx context.Context, id kin.AgentID) ([]kin.AgentID, error) {
	if err := r.authorize(ctx, id, true); err != nil {
		return nil, err
	}
	ids := r.lin.Subtree(id)
	if ids == nil {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return ids, nil
}

// treeIDs is what a read of the tree at id answers, and the id it is
// rooted at: agent id's subtree, or for id 0 the forest (an agent's forest
// is its own subtree).
func (r *Registry) treeIDs(ctx context.Context, id kin.AgentID) ([]kin.AgentID, kin.AgentID, error) {
	if c := caller.Of(ctx); id == 0 && c.Agent != 0 {
		id = c.Agent
	}
	if id == 0 {
		ids, err := r.forest(ctx)
		return ids, 0, err
	}
	ids, err := r.subtreeOf(ctx, id)
	return ids, id, err
}

// forest is the ids of every agent, once the caller (the operator) may
// read them all: the lineage's, caught up with what other hosts of a fleet
// registered (CatchUp), as a subtree's are.
func (r *Registry) forest(ctx context.Context) ([]kin.AgentID, error) {
	if err := caller.OperatorOnly(ctx, "read the whole forest"); err != nil {
		return nil, err
	}
	if err := r.CatchUp(ctx); err != nil {
		return nil, store.KinError(err)
	}
	return r.lin.All(), nil
}

// TreeRows is Tree as the store's rows, streamed: head is called once
// with what the rows do not hold, then rows with runs of them in
// ascending id order as they are read (store.Reader.AgentRowsByIDs), never
// taken apart or nested here (valid until rows returns). The compact tree
// form v2 is made of them.
func (r *Registry) TreeRows(ctx context.Context, id kin.AgentID, head func(kin.TreeRowsHead) error, rows func([]byte) error) error {
	ids, _, err := r.treeIDs(ctx, id)
	if err != nil {
		return err
	}
	h := kin.TreeRowsHead{Fields: r.st.AgentRowFields(), N: len(ids), Spend: map[kin.AgentID]*kin.Spend{}}
	for i, s := range r.auth.SpendOfEach(ids) {
		if s != nil {
			h.Spend[ids[i]] = s
		}
	}
	for _, a := range ids {
		if r.run.Reconciling(a) {
			h.Reconciling = append(h.Reconciling, a)
		}
	}
	if err := head(h); err != nil {
		return err
	}
	return r.st.AgentRowsByIDs(ctx, ids, rows)
}

// BuildTree nests agents (each parent listed before its children) into
// trees. With root 0 every agent whose parent is not in the list is a root.
func BuildTree(agents []*kin.Agent, root kin.AgentID) []*kin.TreeNode {
	at := make(map[kin.AgentID]int32, len(agents)) // an agent's place in agents
	roots := []*kin.TreeNode{}
	all := make([]kin.TreeNode, len(agents)) // one allocation for every node
	// parent[i] is agents[i]'s parent's place, -1 for a root. Each
	// parent's children are counted first and then sliced from one array
	// (appending grew a slice per parent: most of the allocations of a
	// 10,000-agent tree).
	parent := make([]int32, len(agents))
	count := make([]int32, len(agents))
	for i, a := range agents {
		all[i].Agent = *a
		at[a.ID] = int32(i)
		if p, ok := at[a.Parent]; ok && a.ID != root {
			parent[i] = p
			count[p]++
		} else {
			parent[i] = -1
			roots = append(roots, &all[i])
		}
	}
	kids := make([]*kin.TreeNode, len(agents)-len(roots))
	for i, c := range count {
		all[i].Children, kids = kids[:0:c], kids[c:]
	}
	for i, p := range parent {
		if p >= 0 {
			all[p].Children = append(all[p].Children, &all[i])
		}
	}
	return roots
}

// SetStatus applies a status change. Suspending a running agent freezes its
// cgroup (its own processes, or with Cascade the whole subtree) and its
// state becomes suspended once the kernel reports it frozen; resuming thaws
// it. Terminating a running agent stops it first, cancelling its owned
// subtree. An agent may change only its descendants' status.
func (r *Registry) SetStatus(ctx context.Context, req kin.StatusRequest) ([]*kin.Agent, error) {
	if !req.Action.Valid() {
		return nil, kin.Errorf(kin.ECodeInvalid, "action %q is not one of suspend, resume, revoke, terminate", req.Action)
	}
	if len(req.Reason) > kin.MaxScopeLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "reason is longer than %d bytes", kin.MaxScopeLen)
	}
	if err := r.authorize(ctx, req.ID, false); err != nil {
		return nil, err
	}
	if err := r.quota.Allow(ctx, quota.Reports); err != nil {
		return nil, err
	}
	by := caller.Of(ctx).CreatedBy()
	before := map[kin.AgentID]kin.Status{}
	if req.Action == kin.ActionTerminate {
		ids := []kin.AgentID{req.ID}
		if req.Cascade {
			ids = r.lin.Subtree(req.ID)
		}
		as, err := r.st.AgentListByIDs(ctx, ids)
		if err != nil {
			return nil, store.KinError(err)
		}
		for _, a := range as {
			before[a.ID] = a.Status
			if !a.Running() {
				continue
			}
			if running, err := r.run.Running(ctx, a.ID); err != nil {
				return nil, err
			} else if !running {
				continue
			}
			if err := r.run.Terminate(context.WithoutCancel(ctx), a.ID); err != nil {
				return nil, err
			}
		}
	}
	var changed []*kin.Agent
	var refused *kin.Error
	err := store.UpdateAfter(ctx, r.st, func(tx store.Tx, _ *store.AfterCommit) error {
		changed, refused = nil, nil
		now := r.now()
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
			data := kin.AgentStatusData{Agent: a.ID, From: from, To: to, Action: req.Action, By: by, Reason: req.Reason}
			if req.Cascade && a.ID != req.ID {
				data.CascadeFrom = req.ID
			}
			if err := store.AppendEvent(ctx, tx, now, kin.EventAgentStatus, a.ID, a.Parent, data); err != nil {
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
			return r.ps.RevokeAgentsTx(ctx, tx, now, ids, "agent "+string(req.Action))
		}
		return nil
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	if refused != nil {
		return nil, refused
	}
	if req.Action == kin.ActionSuspend || req.Action == kin.ActionResume {
		if err := r.run.Freeze(ctx, req, changed); err != nil {
			return nil, err
		}
		ids := make([]kin.AgentID, len(changed))
		for i, a := range changed {
			ids[i] = a.ID
		}
		if changed, err = r.st.AgentListByIDs(ctx, ids); err != nil {
			return nil, store.KinError(err)
		}
	}
	return changed, nil
}

// Events returns stored events.
func (r *Registry) Events(ctx context.Context, f kin.EventFilter) ([]kin.Event, error) {
	if err := r.eventFilterFor(ctx, &f); err != nil {
		return nil, err
	}
	out, err := r.st.EventList(ctx, f)
	if err != nil {
		return nil, store.KinError(err)
	}
	if out == nil {
		out = []kin.Event{}
	}
	return out, nil
}

// FollowEvents streams events from f.Since on, live, until ctx ends, fn
// fails or the daemon closes.
func (r *Registry) FollowEvents(ctx context.Context, f kin.EventFilter, fn func(kin.Event) error) error {
	if err := r.eventFilterFor(ctx, &f); err != nil {
		return err
	}
	if f.Before != 0 {
		return kin.Errorf(kin.ECodeInvalid, "before reads history backwards; it cannot be followed")
	}
	const page = 1000
	remaining := f.Limit
	for {
		wake := r.wait()
		q := f
		q.Limit = page
		if remaining > 0 && remaining < page {
			q.Limit = remaining
		}
		evs, err := r.st.EventList(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return store.KinError(err)
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
		case <-r.closing:
			return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
		}
	}
}

// eventFilterFor validates f and narrows it for an agent caller to events
// about itself or one of its descendants.
func (r *Registry) eventFilterFor(ctx context.Context, f *kin.EventFilter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if c := caller.Of(ctx); !c.Operator() && f.Agent == 0 {
		f.Agent = c.Agent
	}
	if f.Agent != 0 {
		return r.authorize(ctx, f.Agent, true)
	}
	return nil
}

// Governor returns the rules in force.
func (r *Registry) Governor(ctx context.Context) (*kin.GovernorInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	info := &kin.GovernorInfo{Profile: r.profile, Source: r.profileSource, Overrides: map[string]string{}}
	for k, v := range r.overrides {
		info.Overrides[k] = v
	}
	return info, nil
}

// SetGovernor changes a governor setting and records it as an event. The
// change persists across restarts (it is kept in the store).
func (r *Registry) SetGovernor(ctx context.Context, key, value string) (*kin.GovernorInfo, error) {
	if err := caller.OperatorOnly(ctx, "change the governor"); err != nil {
		return nil, err
	}
	reset := value == kin.GovernorReset
	if reset {
		// Back to the profile's own value; the override is forgotten.
		if !slices.Contains(kin.GovernorSettings, key) {
			return nil, kin.Errorf(kin.ECodeInvalid, "unknown governor setting %q (keys: %s)", key, strings.Join(kin.GovernorSettings, ", "))
		}
		value = strconv.Itoa(settingValue(r.baseProfile, key))
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "governor setting %s needs a whole number (or %q), not %q", key, kin.GovernorReset, value)
	}
	probe := r.Profile()
	if err := governor.SetSetting(&probe, key, n); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "%v", err)
	}
	by := caller.Of(ctx).CreatedBy()
	err = store.UpdateAfter(ctx, r.st, func(tx store.Tx, after *store.AfterCommit) error {
		from, err := r.governorInTx(ctx, tx)
		if err != nil {
			return err
		}
		stored := value
		if reset {
			stored = "" // an empty setting is no override (profileWith)
		}
		if err := tx.SettingSet(ctx, "governor."+key, stored); err != nil {
			return err
		}
		settings, err := tx.SettingList(ctx)
		if err != nil {
			return err
		}
		to, overrides, err := profileWith(r.baseProfile, settings)
		if err != nil {
			return err
		}
		after.Do(func() {
			r.mu.Lock()
			r.profile, r.overrides, r.settings = to, overrides, settings
			r.mu.Unlock()
		})
		return store.AppendEvent(ctx, tx, r.now(), kin.EventGovernorChanged, 0, 0, kin.GovernorChangedData{
			Key: key, From: settingValue(from, key), To: n, By: by,
		})
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	return r.Governor(ctx)
}

func settingValue(p kin.Profile, key string) int {
	if key == "max_children" {
		return p.MaxChildren
	}
	return p.MaxGenerationDepth
}

func nonNil(a []*kin.Agent) []*kin.Agent {
	if a == nil {
		return []*kin.Agent{}
	}
	return a
}

// AgentByRef finds an agent by id, or by name: the live agent holding it
// (an ended agent is named by its id).
func (r *Registry) AgentByRef(ctx context.Context, ref string) (*kin.Agent, error) {
	if id, err := kin.ParseAgentID(ref); err == nil {
		// Not Agent: that limits an agent to its descendants, and a
		// child messages its parent. The caller's checks decide.
		a, err := r.st.AgentGetByID(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
		}
		if err != nil {
			return nil, store.KinError(err)
		}
		return a, nil
	}
	if _, err := kin.ParseName(ref); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "%q is neither an agent id nor an agent name", ref)
	}
	a, err := r.st.AgentLiveByName(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return nil, kin.Errorf(kin.ECodeNotFound, "no live agent is named %q (name an ended agent by its id)", ref)
	}
	if err != nil {
		return nil, store.KinError(err)
	}
	return a, nil
}
