// Package store defines what kin keeps durably: agents, events, governor
// settings and spawn rejections, behind the Store interface that each driver
// (store/sqlite today, PostgreSQL later) implements and store/storetest
// exercises; store/storeopen opens one by its DSN (this package cannot: its
// drivers import it).
//
// A store never decides anything: the governor's rules are checked by the
// daemon inside Update, so that the check and the write are one transaction.
// Drivers translate their own errors into the sentinels below, once.
package store

import (
	"context"
	"errors"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/internal/auditlog"
	"github.com/kin-agents/kin/kin"
)

// Sentinel errors every driver maps its failures to.
var (
	ErrNotFound    = errors.New("store: not found")
	ErrNameTaken   = errors.New("store: name taken by a live agent")
	ErrWalletTaken = errors.New("store: wallet taken")
	ErrClosed      = errors.New("store: closed")
	// ErrHostTaken: another daemon (another home) holds the host name's
	// unexpired lease.
	ErrHostTaken = errors.New("store: host name held by another daemon")
)

// Store is a kin store. All methods are safe for concurrent use.
type Store interface {
	Reader
	Notifier
	// Update runs fn in a read-write transaction and returns once fn's
	// writes are durable (or fn failed and its writes were undone). Updates
	// are serialised: fn sees every earlier Update's writes and no other
	// writer runs while it does, so rules checked in fn hold for its write.
	// A driver may commit several Updates together (group commit).
	// fn must not keep tx after it returns and must not call Update.
	Update(ctx context.Context, fn func(tx Tx) error) error
	// LogHead is the committed event log's tree: its size (the number of
	// events) and RFC 6962 root hash. It reads the store, so it includes
	// what other handles on the same store committed.
	LogHead(ctx context.Context) (int64, tlog.Hash, error)
	// LogSize is LogHead's size alone, without computing the root.
	LogSize(ctx context.Context) (int64, error)
	// Driver names the driver and its location, with no secrets.
	Driver() string
	Close() error
}

// LazyUpdater is a Store that can commit an Update without waiting for the
// disk: UpdateLazy returns once fn's writes are committed and visible to
// every reader and safe from a crash of the process, and they reach the
// disk with the next Update's durable commit (or sooner). A crash of the
// machine may lose them, and nothing after them. Use it only for a record
// whose loss a crash of the machine makes moot: a process's pid, which no
// process outlives.
type LazyUpdater interface {
	UpdateLazy(ctx context.Context, fn func(tx Tx) error) error
}

// Deferrer is a Store that can hold an Update's writes back and send them
// to the database with a later statement (PostgreSQL: one round trip to
// the server fewer per write). UpdateDeferrable is Update, except that fn
// promises to be re-runnable: its only effects are through tx (and what it
// leaves in an AfterCommit, which UpdateAfterDeferrable resets per run),
// and it sets its outputs afresh at each run. In such an Update, AgentInsert
// may return the agent with its id before the row is written, and SpendAdd
// may return before its sums are; when such a write then fails (the name
// was taken meanwhile), the driver undoes the Update's writes and runs fn
// again with its writes done at once, so that it sees the failure
// (ErrNameTaken) as it would in Update. A read after such a write in the
// same Update sees it. Whatever fn returns, the result is its last run's.
type Deferrer interface {
	UpdateDeferrable(ctx context.Context, fn func(tx Tx) error) error
}

// LazyDeferrer is a Store whose Updates can be both lazy (LazyUpdater)
// and deferrable (Deferrer): fn must be re-runnable.
type LazyDeferrer interface {
	UpdateLazyDeferrable(ctx context.Context, fn func(tx Tx) error) error
}

// WarmHolder is a Store that reads, in the background, the rows its
// commits changed back into a cache of its own (SQLite's row cache's
// warmer), and that can be told to hold those reads: from HoldWarming on,
// no read starts until release (which may be called more than once; a read
// already under way ends first), or until the hold lapses, a while after it
// was taken. A cancellation without a grace holds them from before it
// marks its agents stopping until it has recorded their ends: 1,110 rows
// read again between the two took a third of the daemon's CPU while the
// kill's processes died on the same two cores (issue 22), and are changed
// again by the record anyway.
type WarmHolder interface {
	HoldWarming() (release func())
}

// EarlyDeferrer is a Store whose deferrable Update (Deferrer) can answer
// before its commit is on the disk: UpdateEarlyDeferrable returns once fn's
// writes are committed and visible to every reader and safe from a crash
// of the process, with durable, which waits until they are on the disk as
// an Update's are when it returns (nil), or says why they are not. The
// caller does what needs no durability meanwhile, and calls durable before
// anything that must follow it: a spawn makes the agent's folders while
// its registration reaches the disk, and starts its process after.
type EarlyDeferrer interface {
	UpdateEarlyDeferrable(ctx context.Context, fn func(tx Tx) error) (durable func() error, err error)
}

// Durable is the durable of an Update that was durable when it returned.
func Durable() error { return nil }

// UpdateDeferrable is st's UpdateDeferrable where st has one (Deferrer),
// else its Update. fn must be re-runnable (Deferrer).
func UpdateDeferrable(ctx context.Context, st Store, fn func(tx Tx) error) error {
	if d, ok := st.(Deferrer); ok {
		return d.UpdateDeferrable(ctx, fn)
	}
	return st.Update(ctx, fn)
}

// Notifier tells waiters that events were committed. Waiters read what is
// new from the store (by sequence number), so a notification carries
// nothing and none can be lost: take the channel first, then read, then
// wait on it.
//
// A driver closes the channel at least after every commit of its own
// handle that appended events, once the commit is durable (a LazyUpdater's
// lazy commit: once it is visible), and, within a
// latency it documents, after such a commit by any other handle on the same
// store (another process, another host). It may close it at other times
// too: a wake-up that finds nothing new is allowed, a commit that appended
// events and wakes nobody is not.
type Notifier interface {
	// Wait returns a channel that is closed at the next such commit.
	Wait() <-chan struct{}
}

// AppendedHere is a Store that knows which events its own handle's commits
// appended: a follower of the log skips what this process already applied
// after its own commits, though it may read the event before the
// committing goroutine has applied it. It may forget old commits (false:
// the follower applies the event again, which must be harmless), never
// claim another handle's.
type AppendedHere interface {
	AppendedHere(seq int64) bool
}

// Subscriber is a Notifier whose waiters may care for some event types
// only: a commit of this handle that appended none of them leaves such a
// waiter asleep (a model call's commit need not wake the fleet follower).
// Other handles' commits, whose types the driver does not learn, wake it.
type Subscriber interface {
	// Subscribe returns the waiter's Wait: woken by this handle's commits
	// that appended an event of one of types (except: of a type not
	// among them), as Notifier.Wait otherwise.
	Subscribe(types []string, except bool) func() <-chan struct{}
}

// WaitFor is a Wait for a waiter that cares for events of types only
// (except: of the other types): n's subscription where n is a Subscriber,
// else n.Wait, which wakes it for every commit.
func WaitFor(n Notifier, types []string, except bool) func() <-chan struct{} {
	if s, ok := n.(Subscriber); ok {
		return s.Subscribe(types, except)
	}
	return n.Wait
}

// Reader is the read side, used outside transactions and inside them.
type Reader interface {
	AgentGetByID(ctx context.Context, id kin.AgentID) (*kin.Agent, error)
	AgentList(ctx context.Context, f kin.AgentFilter) ([]*kin.Agent, error)
	// AgentAncestors returns the agent, then its parent, up to its root.
	AgentAncestors(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error)
	// AgentSubtree returns the agent and all its descendants, each parent
	// before its children (by generation, then id).
	AgentSubtree(ctx context.Context, id kin.AgentID) ([]*kin.Agent, error)
	AgentCount(ctx context.Context) (int, error)
	// AgentCountByStateRole calls fn once for each (state, role) pair that
	// has agents, of any status, with their number: an aggregate, so a
	// metrics scrape reads no agent's row.
	AgentCountByStateRole(ctx context.Context, fn func(state, role string, n int)) error
	// OldestHeartbeat returns the earliest last heartbeat among agents
	// whose status is active and state active or stale (those the liveness
	// watch follows), and false when none has one.
	OldestHeartbeat(ctx context.Context) (time.Time, bool, error)
	// AgentLiveByName returns the live agent (status not terminated) with
	// the name, or ErrNotFound.
	AgentLiveByName(ctx context.Context, name string) (*kin.Agent, error)
	// AgentNamesOfHost returns each name of the agents host runs (host
	// "": every agent; an agent recorded with no host is every host's)
	// once, with the latest agent of that name (the highest id), by name.
	AgentNamesOfHost(ctx context.Context, host string) ([]AgentName, error)
	// AgentProcessSpec returns what was started for a spawned agent, for a
	// replacement after a crash (or ErrNotFound).
	AgentProcessSpec(ctx context.Context, id kin.AgentID) (ProcessSpec, error)
	// AgentLinks returns every agent's id and parent, by id.
	AgentLinks(ctx context.Context) ([]AgentLink, error)
	// HostList returns every host of the fleet, by name, with the number
	// of live agents each runs.
	HostList(ctx context.Context) ([]HostRow, error)
	// AgentListByIDs returns the agents with the given ids, in that order;
	// ids that do not exist are left out.
	AgentListByIDs(ctx context.Context, ids []kin.AgentID) ([]*kin.Agent, error)
	// AgentListLeanByIDs is AgentListByIDs with only the fields a
	// cancellation reads set in each row: ID, Parent, Life, Status,
	// State, PID, Command, Grace, EndedAt, Result and Host (the others
	// are zero). Its rows are for deciding, never for showing.
	AgentListLeanByIDs(ctx context.Context, ids []kin.AgentID) ([]*kin.Agent, error)
	// AgentRowsByIDs reads the agents with the given ids (those that
	// exist) in ascending id order, and calls emit with runs of their
	// rows as read, in order, each row a record "<byte length>:<row>"
	// where the row is the agent's fields named by AgentRowFields, in that
	// order, each an integer "<decimal>," or a text "<byte length>:<bytes>"
	// (times are Unix nanoseconds, 0 for none; a bool 0 or 1; command its
	// JSON array; exit_state 0 for no exit, 1 known, 2 unknown). The bytes
	// passed to emit are valid until it returns (a reader may reuse them
	// for the next call). It stops at emit's first error and
	// returns it. For bulk reads that pass rows on (the tree's compact
	// wire form) without taking them apart.
	AgentRowsByIDs(ctx context.Context, ids []kin.AgentID, emit func(records []byte) error) error
	// AgentRowFields names the fields of AgentRowsByIDs's rows.
	AgentRowFields() []string
	// AgentListByParents returns the children of the given agents, by id,
	// in one read.
	AgentListByParents(ctx context.Context, parents []kin.AgentID) ([]*kin.Agent, error)
	EventList(ctx context.Context, f kin.EventFilter) ([]kin.Event, error)
	EventLastSeq(ctx context.Context) (int64, error)
	SettingList(ctx context.Context) (map[string]string, error)
	// AgentPolicyList returns every agent that has a stage, a policy, a
	// deadline or an asker (RequestedBy), by id.
	AgentPolicyList(ctx context.Context) ([]AgentPolicyRow, error)
	// SpendList returns every agent's spend and budget counters, by id.
	SpendList(ctx context.Context) ([]SpendRow, error)
	// PermChain returns the permission facts of an agent and each of its
	// ancestors, the agent first (nothing for an unknown id); an agent
	// whose spawn was escalated is followed by the agent that asked for it
	// (kin.Agent.RequestedBy) and that one's chain. Inside a
	// transaction it is what a budget check reads: the counters as every
	// earlier Update left them.
	PermChain(ctx context.Context, id kin.AgentID) ([]PermRow, error)
	// AgentKeyGet returns an agent's public key, or ErrNotFound.
	AgentKeyGet(ctx context.Context, id kin.AgentID) (AgentKeyRow, error)
	// AgentKeyByJKT returns the agent whose key has the thumbprint, or
	// ErrNotFound.
	AgentKeyByJKT(ctx context.Context, jkt string) (AgentKeyRow, error)
	// GrantList returns the grants of one agent (0: every agent), by agent
	// and resource.
	GrantList(ctx context.Context, agent kin.AgentID) ([]GrantRow, error)
	// AuthTokenGet returns an issued auth token, or ErrNotFound.
	AuthTokenGet(ctx context.Context, jti string) (AuthTokenRow, error)
	// AuthTokenList returns the issued auth tokens that expire after
	// since, newest first; with agent not 0, only those bound to it or
	// obtained by it.
	AuthTokenList(ctx context.Context, agent kin.AgentID, since time.Time) ([]AuthTokenRow, error)
	// SigningKeyList returns the published public signing keys of every
	// host of the fleet, by role, then kid.
	SigningKeyList(ctx context.Context) ([]SigningKeyRow, error)

	// The event log's stored side (auditlog.Source): every event with the
	// tree hashes stored with it, the signed checkpoints, stored hashes by
	// tlog index.
	auditlog.Source
	// LogCheckpointLatest returns the checkpoint of the largest size, or
	// ErrNotFound.
	LogCheckpointLatest(ctx context.Context) (auditlog.StoredCheckpoint, error)
	// LogRegistration returns an agent's agent.registered event, or
	// ErrNotFound.
	LogRegistration(ctx context.Context, id kin.AgentID) (kin.Event, error)
}

// Tx is a read-write transaction.
type Tx interface {
	Reader
	// AgentInsert stores a new agent with the next id and returns it.
	// It fails with ErrNameTaken or ErrWalletTaken on a clash.
	AgentInsert(ctx context.Context, p AgentInsertParams) (*kin.Agent, error)
	AgentUpdateStatus(ctx context.Context, p AgentUpdateStatusParams) error
	// AgentUpdate changes the runtime fields p sets.
	AgentUpdate(ctx context.Context, p AgentUpdateParams) error
	// AgentUpdateMany changes the runtime fields p sets (p.ID aside) of
	// every agent of ids to the same values, in one statement: a
	// cascade's record. It fails with ErrNotFound when an id is not an
	// agent's (the Update that gets it fails, and its writes with it).
	AgentUpdateMany(ctx context.Context, ids []kin.AgentID, p AgentUpdateParams) error
	AgentUpdateSpawnBlock(ctx context.Context, id kin.AgentID, until time.Time) error
	// AgentCountLive counts live agents (kin.Agent.Live) that match p.
	AgentCountLive(ctx context.Context, p AgentCountLiveParams) (int, error)
	AgentWalletExists(ctx context.Context, wallet string) (bool, error)
	// EventAppend stores e with the next sequence number and returns it,
	// and, in the same transaction, the event log's tree hashes for its
	// leaf (auditlog.AppendLeaf): the leaf index is seq-1. e.Data must be
	// compact JSON.
	EventAppend(ctx context.Context, e kin.Event) (kin.Event, error)
	SpawnRejectionInsert(ctx context.Context, p SpawnRejectionInsertParams) error
	// SpawnRejectionCount counts a parent's counted rejections at or after Since.
	SpawnRejectionCount(ctx context.Context, parent kin.AgentID, since time.Time) (int, error)
	SettingSet(ctx context.Context, key, value string) error
	// SpendAdd adds reported usage to an agent's own spend and to the
	// subtree spend of the agent and of every ancestor.
	SpendAdd(ctx context.Context, id kin.AgentID, tokens int64, cost float64) error
	// SpendSpawnAdd counts one more descendant spawned under each agent of
	// ids (those whose budget limits descendants).
	SpendSpawnAdd(ctx context.Context, ids []kin.AgentID) error
	// SpendSetExhausted records why an agent's subtree was stopped for its
	// budget.
	SpendSetExhausted(ctx context.Context, id kin.AgentID, why string) error
	AgentKeyInsert(ctx context.Context, k AgentKeyRow) error
	// GrantSet creates or replaces the grant of (Agent, Resource).
	GrantSet(ctx context.Context, g GrantRow) error
	// GrantDelete removes a grant and reports whether there was one.
	GrantDelete(ctx context.Context, agent kin.AgentID, resource string) (bool, error)
	AuthTokenInsert(ctx context.Context, t AuthTokenRow) error
	// AuthTokenRevoke marks revoked the unexpired, unrevoked tokens that p
	// selects and returns them.
	AuthTokenRevoke(ctx context.Context, p AuthTokenRevokeParams) ([]AuthTokenRow, error)
	// AuthTokenPrune deletes the tokens that expired before t.
	AuthTokenPrune(ctx context.Context, t time.Time) error
	// LogCheckpointInsert keeps a signed checkpoint; one of the same size
	// already kept stays.
	LogCheckpointInsert(ctx context.Context, c auditlog.StoredCheckpoint) error
	// HostClaim takes h.Name's lease for h.Home until h.LeaseUntil: it
	// fails with ErrHostTaken while another home's lease on the name runs
	// past h.RenewedAt (a restart on the same home takes its lease back
	// at once).
	HostClaim(ctx context.Context, h HostRow) error
	// HostRenew moves the lease of name, held by home, to until (renewed
	// at); ErrNotFound when home no longer holds it.
	HostRenew(ctx context.Context, name, home string, renewed, until time.Time) error
	// HostRelease ends home's lease on name at once (a clean stop).
	HostRelease(ctx context.Context, name, home string) error
	// LeaseTake takes or renews the singleton lease name for holder until
	// until, and reports whether holder holds it: it is free, expired at
	// now, or holder's already. A fleet's singletons (the log's
	// checkpoint signer) hold one.
	LeaseTake(ctx context.Context, name, holder string, now, until time.Time) (bool, error)
	// LeaseRelease ends holder's lease name at once (a clean stop).
	LeaseRelease(ctx context.Context, name, holder string) error
	// SigningKeyPublish makes keys host's published keys of role: those
	// not among them are removed, new ones added, and each one's
	// retired_at set. It reports whether anything changed.
	SigningKeyPublish(ctx context.Context, host, role string, keys []SigningKeyRow) (bool, error)
}

// SigningKeyRow is the public half of one host's signing key (the agent
// provider's or the person server's): one identity for the fleet, whose
// private keys stay each on its host.
type SigningKeyRow struct {
	KID       string
	Host      string
	Role      string
	PublicKey []byte
	CreatedAt time.Time
	RetiredAt time.Time // zero: its host's current key
}

// HostRow is a host of the fleet: a kin serve, its lease on its name, and
// what it says of itself.
type HostRow struct {
	Name        string
	Home        string // the id of the daemon's home that holds the lease
	Address     string
	Containment string
	Version     string
	StartedAt   time.Time
	RenewedAt   time.Time
	LeaseUntil  time.Time // zero: released
	Agents      int       // HostList's: its live agents
}

// Live reports whether h's lease runs at now: taken and not yet expired
// (a released lease is zero).
func (h HostRow) Live(now time.Time) bool { return h.LeaseUntil.After(now) }

// AgentKeyRow is an agent's AAuth identity: its Ed25519 public key, the key's
// RFC 7638 thumbprint and its identifier's local part.
type AgentKeyRow struct {
	Agent     kin.AgentID
	JKT       string
	PublicKey []byte
	Local     string
	CreatedAt time.Time
}

// GrantRow lets a top-level agent obtain auth tokens for a resource's scopes
// (space-separated) until Until (zero: no end).
type GrantRow struct {
	Agent     kin.AgentID
	Resource  string
	Scope     string
	Until     time.Time
	CreatedAt time.Time
}

// AuthTokenRow is an auth token kin issued: bound to Agent's key, obtained
// by Parent.
type AuthTokenRow struct {
	JTI           string
	Agent         kin.AgentID
	Parent        kin.AgentID
	Resource      string
	Scope         string
	IssuedAt      time.Time
	ExpiresAt     time.Time
	RevokedAt     time.Time
	RevokedReason string
}

// AuthTokenRevokeParams selects tokens to revoke: those bound to or obtained
// by any of Agents, or, with Parent set, those Parent obtained for Resource
// ("" any). Tokens that expired before At are left alone.
type AuthTokenRevokeParams struct {
	Agents   []kin.AgentID
	Parent   kin.AgentID
	Resource string
	At       time.Time
	Reason   string
}

// AgentPolicyRow is an agent's own stage and policy.
type AgentPolicyRow struct {
	ID         kin.AgentID
	Stage      string
	Policy     []byte // JSON of the kin.Policy it asked for, or nil
	DeadlineAt time.Time
	// RequestedBy is the agent that asked for its escalated spawn, or 0.
	RequestedBy kin.AgentID
}

// SpendRow is an agent's own reported spend and its subtree's counters.
type SpendRow struct {
	ID        kin.AgentID
	Tokens    int64
	Cost      float64
	SubTokens int64   // the agent's and every descendant's tokens
	SubCost   float64 // the agent's and every descendant's cost
	Spawns    int64   // descendants spawned under it (SpendSpawnAdd)
	Exhausted string  // why its subtree was stopped, or ""
}

// PermRow is what a permission check reads of one agent: what it asked for
// itself, and its spend and counters.
type PermRow struct {
	// Agent is the whole row of the agent the chain was asked for (the
	// first PermRow only; nil in the others): a registration reads its
	// parent and the parent's chain in one query.
	Agent      *kin.Agent
	ID, Parent kin.AgentID
	// RequestedBy is the agent that asked for this one's escalated spawn
	// (0: none): the chain's next link when set, else Parent.
	RequestedBy kin.AgentID
	Role        string
	Stage       string
	Policy      []byte // JSON of the kin.Policy it asked for, or nil
	DeadlineAt  time.Time
	Spend       SpendRow
}

// AgentLink is one parent-child link of the family tree.
type AgentLink struct {
	ID, Parent kin.AgentID
}

// AgentName is a name and the latest agent of that name.
type AgentName struct {
	Name string
	ID   kin.AgentID
}

// AgentInsertParams is a new agent; ID is assigned by the store.
type AgentInsertParams struct {
	Agent       kin.Agent // Command, Restart, Grace and Replaces are stored too
	NameContext string    // the context part of the name (seed 002), for cardinality
	Env         []string  // the spawner's KEY=VALUE additions (never shown by kin.Agent)
	Dir         string
	Handoff     []byte // JSON of the kin.Handoff the agent was given, or nil
	Policy      []byte // JSON of the kin.Policy it asked for, or nil (Agent.Stage is stored too)
	DeadlineAt  time.Time
}

// ProcessSpec is what a spawned agent runs.
type ProcessSpec struct {
	Command []string
	Env     []string
	Dir     string
	Restart kin.RestartPolicy
	Grace   kin.Duration
	Handoff []byte // JSON of the kin.Handoff, or nil
}

// AgentUpdateParams changes an agent's runtime fields; nil fields stay.
type AgentUpdateParams struct {
	ID            kin.AgentID
	At            time.Time // updated_at
	Status        *kin.Status
	State         *kin.State
	PID           *int
	StartedAt     *time.Time
	EndedAt       *time.Time
	Exit          *kin.Exit
	EndReason     *string
	Cursor        *string
	LastHeartbeat *time.Time
	Session       *string
	Result        *kin.ResultStatus
	Stage         *string
}

// AgentUpdateStatusParams changes status and state of one agent.
type AgentUpdateStatusParams struct {
	ID     kin.AgentID
	Status kin.Status
	State  kin.State // "" leaves the state as it is
	At     time.Time
}

// AgentCountLiveParams selects live agents to count. Zero fields match all;
// Parent counts only that parent's children when HasParent is set.
type AgentCountLiveParams struct {
	Parent      kin.AgentID
	HasParent   bool
	Role        string
	NameContext *string // nil: any context
	Host        *string // nil: any host of the fleet
	// Accountable leaves out agents in state offline: those the fleet can
	// no longer account for (their host's lease expired, or their
	// heartbeats stopped). A governor's cardinality slot is held only by
	// an accountable agent (seed 002: GO is a lease-renewed singleton).
	Accountable bool
	// Except leaves out one agent (0: none).
	Except kin.AgentID
}

// SpawnRejectionInsertParams records one rejected spawn for the circuit breaker.
type SpawnRejectionInsertParams struct {
	Parent  kin.AgentID
	At      time.Time
	Counted bool // false for rejections caused by the open breaker itself
}
