// Package personserver is kin's identity provider (seed 004, AAuth): it
// gives every spawned agent an Ed25519 key and agent tokens (sub-agents'
// naming their parent, never outliving it), keeps the grants that let a
// top-level agent obtain auth tokens for a resource, issues those auth
// tokens to sub-agents through their parents at its public endpoints
// (Handler: metadata, keys, /auth-token, token status), revokes them when an
// agent ends, and answers kin.IdentityService.
//
// It must never start, stop or decide the lineage of an agent (the lineage
// it is given says who descends from whom), or serve anything but AAuth's
// endpoints without the operator's check in front.
package personserver
