// Package identity holds kin's AAuth token logic: Ed25519 signing keys with
// a kid, their public JWKs (RFC 8037 OKP), strict JWK and JWK Set parsing,
// RFC 7638 thumbprints, and the tokens of draft-hardt-oauth-aauth-protocol:
// agent tokens ("aa-agent+jwt") kin issues to agents and sub-agents, auth
// tokens ("aa-auth+jwt", from a person server) and resource tokens
// ("aa-resource+jwt", from a resource), their issuance and verification, and
// an unverified Peek at a token's typ, kid and iss for routing.
//
// The package owns: the JWS compact serialization (alg "Ed25519" only, one
// typ per verifier, no crit), the claim sets and their rules (auth and
// resource tokens: at most an hour's lifetime, dwk naming the issuer's
// well-known document; a resource token's agent_jkt a SHA-256 thumbprint),
// the agent-token claim set and its issuance rules (exp after iat and at
// most 24 hours later; no '+' in a top-level local part; a sub-agent's local
// part is "<parent-local>+<discriminator>", same iss and ps as its parent,
// exp never after the parent's; single-level depth when asked), and the
// mapping of every verification failure to an AAuth Signature-Error code
// (invalid_jwt, expired_jwt, invalid_key).
//
// It must never: read the wall clock (callers pass the time), touch files,
// the network or the daemon's registry, store or log a private key, serve
// HTTP, or accept any algorithm other than Ed25519 (no "none", no HMAC, no
// "EdDSA" alias). It does not decide lineage from a local part: the parent
// token's claims are given by the caller, which takes them from the registry.
package identity
