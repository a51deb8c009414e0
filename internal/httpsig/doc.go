// Package httpsig signs and verifies HTTP requests with HTTP Message
// Signatures (RFC 9421) under the AAuth profile (draft-hardt-oauth-aauth-protocol
// and draft-hardt-httpbis-signature-key).
//
// It owns:
//   - the RFC 9421 signature base (SignatureBase), general enough for the
//     derived components @method, @authority, @path, @query, @scheme,
//     @target-uri, @request-target and plain header fields;
//   - Sign: Ed25519 over @method, @authority, @path, signature-key and, when the
//     request has a body, content-digest (RFC 9530, sha-256, computed here) and
//     content-type; label "sig", created set from the caller's clock, a
//     random nonce, alg and keyid never sent; Signature-Key in the jwt
//     scheme;
//   - Verify: parsing Signature-Input, Signature and Signature-Key (RFC 8941
//     structured fields, through github.com/dunglas/httpsfv), the required
//     components, a 60 s window around the caller's clock, the body's
//     Content-Digest, and the Ed25519 check;
//   - Replays: accepting each verified signature once while the window
//     lasts, in a bounded memory;
//   - the Signature-Error codes and the header that reports them (Error).
//
// It must never:
//   - verify, trust or interpret the JWT carried in Signature-Key: the caller's
//     resolve function turns a SignatureKey into a public key (JWT and JWK
//     validation belong to another package);
//   - read the wall clock: every time comes from the caller;
//   - remember a signature that did not verify, or forget one the window
//     still accepts;
//   - accept an algorithm other than Ed25519, or trust an alg parameter over
//     the key;
//   - consume a request body it does not give back: Verify and Sign restore it
//     for later readers.
package httpsig
