// Package identity holds kin's AAuth agent-provider token logic: Ed25519
// signing keys with a kid, their public JWKs (RFC 8037 OKP) and RFC 7638
// thumbprints, and the agent tokens (JWT, typ "aa-agent+jwt",
// draft-hardt-oauth-aauth-protocol) kin issues to agents and sub-agents, and
// their verification.
//
// The package owns: the JWS compact serialization (alg "Ed25519" only), the
// agent-token claim set and the issuance rules (exp after iat and at most 24
// hours later; no '+' in a top-level local part; a sub-agent's local part is
// "<parent-local>+<discriminator>", same iss and ps as its parent, exp never
// after the parent's; single-level depth when asked), and the mapping of
// every verification failure to an AAuth Signature-Error code (invalid_jwt,
// expired_jwt, invalid_key).
//
// It must never: read the wall clock (callers pass the time), touch files,
// the network or the daemon's registry, store or log a private key, serve
// HTTP, or accept any algorithm other than Ed25519 (no "none", no HMAC, no
// "EdDSA" alias). It does not decide lineage from a local part: the parent
// token's claims are given by the caller, which takes them from the registry.
package identity
