// Package registry is kin's lineage registry (seed 000) and governor
// (seed 002): it registers every agent, spawned ones too, with the
// governor's rules (kin.Profile, package governor's decisions) and the
// authority's admission checked in the registration's own transaction;
// answers who exists, under whom (Agent, Agents, Children, Ancestors,
// Tree), status changes and their cascades, the event stream (Events,
// FollowEvents) and the governor's settings, read from the store inside the
// transactions they decide.
//
// It must never run a process (what it needs of the runner comes through
// the Runner it is given), decide a rule itself (package governor does) or
// keep a fact a check decides on only in memory: the lineage and the
// governor's profile are caches changed after commit (CacheDiff).
package registry
