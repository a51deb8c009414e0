// Package aauth is kin's public AAuth toolkit (draft-hardt-oauth-aauth-protocol-11)
// for the two parties that talk to kin from outside: a resource that accepts
// AAuth calls, and an agent that makes them.
//
// It owns:
//   - discovery: fetching and caching an issuer's well-known metadata
//     ({iss}/.well-known/{dwk}) and its JWKS, with the issuer compared byte for
//     byte, the jwks_uri kept on the issuer's scheme and host, bounded sizes,
//     timeouts, a 10-minute cache and at most one unknown-kid refetch per
//     issuer a minute (Discovery);
//   - the resource side: an http.Handler middleware that verifies signed
//     requests and accepts each signature once, answers an agent token with
//     a resource token challenge (AAuth-Requirement: requirement=auth-token),
//     accepts auth tokens from the one trusted person server, and optionally
//     asks that person server whether each auth token is still active
//     (Resource);
//   - the agent side: signing requests with an agent or auth token and asking a
//     person server for an auth token (Agent);
//   - the AAuth-Requirement header, problem+json error bodies, and Ed25519 keys
//     as PKCS#8 PEM.
//
// It must never:
//   - fetch metadata for an issuer it was not configured to trust (the issuer
//     is checked before any request leaves);
//   - trust anything in a token before its signature verified (identity.Peek
//     only routes);
//   - send a Signature-Error header with a 403, or tell a peer more than an
//     error code and a fixed sentence (details go to the logger);
//   - log or serve a private key;
//   - implement JWS, JWK or HTTP signatures itself: those are internal/identity
//     and internal/httpsig.
package aauth
