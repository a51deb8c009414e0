// Package runner runs kin's agents: it answers kin.RunnerService (Spawn,
// Stop, Heartbeat, Logs, Whoami, Resources, Wait, Result, ContextPack).
// Each spawn is registered through the registry, then started through the
// supervisor (a cgroup or a PID namespace of its own) and the sandbox shim
// with what its effective policy gives (the authority's); each agent gets
// its tree in the agent filesystem (ctxtree.go) and its socket
// (agentsock.go); a writer keeps the tree following the event log
// (ctxsync.go); an exit is recorded, its result checked and handed to the
// parent, and its owned subtree cancelled (cancelTree); restart policies,
// liveness (stale, offline) and the re-adoption of what an earlier daemon
// left running (reconcile.go) are here too.
//
// It must never decide a rule or a permission (the registry and the
// authority do, inside their transactions), or keep a fact a check decides
// on only in memory.
package runner
