// Package authority is kin's permission authority (seeds 001 and 003): it
// answers kin.AuthorityService (Policy, Authorize, Explain, Usage, Promote),
// admits every registration inside its transaction (Admit: a child only
// ever gets less than its parent, and never beyond its ancestors' budgets),
// records the files a policy's mounts name and hands them to the sandbox as
// descriptors (mounts.go), and stops a subtree whose budget or deadline ran
// out through the stop it is given.
//
// The store decides: every check that guards a write reads its facts in
// that write's transaction (store.PermChain). The Authority's memory is a
// cache changed only after commits, which Load rebuilds and CacheDiff
// compares with the store.
//
// It must never decide policy itself (package policy does, on the facts
// gathered here), start or stop a process, or read what another service
// keeps in memory beyond the lineage it is given.
package authority
