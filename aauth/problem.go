package aauth

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

// Token claim sets, as internal/identity defines them.
type (
	AgentClaims    = identity.AgentClaims
	AuthClaims     = identity.AuthClaims
	ResourceClaims = identity.ResourceClaims
	JWK            = identity.JWK
)

// SignatureError is a Signature-Error code with a detail (the type lives in
// internal/httpsig; the alias lets code outside this module match it with
// errors.As).
type SignatureError = httpsig.Error

// Well-known document names.
const (
	DWKAgent    = identity.DWK
	DWKPerson   = identity.DWKPerson
	DWKResource = identity.DWKResource
)

// Header names.
const (
	HeaderRequirement    = "AAuth-Requirement"
	HeaderSignatureError = httpsig.HeaderSignatureError
)

// Requirement values of the AAuth-Requirement header.
const (
	RequirementAgentToken = "agent-token"
	RequirementAuthToken  = "auth-token"
)

// Problem codes this package sends in problem+json bodies besides the
// Signature-Error codes.
const (
	CodeAgentTokenRequired = "agent_token_required"
	CodeAuthTokenRequired  = "auth_token_required"
	CodeInsufficientScope  = "insufficient_scope"
	CodeUnavailable        = "temporarily_unavailable"
	CodeServerError        = "server_error"
)

// AuthTokenRequest is the body an agent POSTs to a person server's
// auth_token_endpoint.
type AuthTokenRequest struct {
	ResourceToken  string `json:"resource_token"`
	SubagentToken  string `json:"subagent_token,omitempty"`
	ActorToken     string `json:"actor_token,omitempty"`
	PresentedToken string `json:"presented_token,omitempty"`
	Justification  string `json:"justification,omitempty"`
}

// AuthTokenResponse is the person server's answer to an AuthTokenRequest.
type AuthTokenResponse struct {
	AuthToken string `json:"auth_token"`
	ExpiresIn int64  `json:"expires_in"`
}

// Metadata is an issuer's well-known document.
type Metadata struct {
	Issuer              string `json:"issuer"`
	JWKSURI             string `json:"jwks_uri"`
	AuthTokenEndpoint   string `json:"auth_token_endpoint,omitempty"`
	RevocationEndpoint  string `json:"revocation_endpoint,omitempty"`
	TokenStatusEndpoint string `json:"token_status_endpoint,omitempty"` // kin extension
}

// TokenStatus is the answer of a person server's token_status_endpoint (a
// kin extension): GET <endpoint>?jti=<jti>.
type TokenStatus struct {
	JTI    string `json:"jti"`
	Active bool   `json:"active"`
	Reason string `json:"reason,omitempty"`
}

// Problem is an error answer with a problem+json body {"error", "detail"}.
type Problem struct {
	Status int    `json:"-"`
	Code   string `json:"error"`
	Detail string `json:"detail,omitempty"`
}

func (p *Problem) Error() string {
	if p.Detail == "" {
		return fmt.Sprintf("aauth: %s (HTTP %d)", p.Code, p.Status)
	}
	return fmt.Sprintf("aauth: %s: %s (HTTP %d)", p.Code, p.Detail, p.Status)
}

// WriteProblem writes p as an application/problem+json response; a zero
// Status is 500.
func WriteProblem(w http.ResponseWriter, p *Problem) {
	status := p.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"error":"server_error"}`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteUnavailable answers 503 temporarily_unavailable with detail and
// Retry-After (retryAfter in whole seconds, rounded up): how a request is
// refused that the server had no room to take, such as a signed request
// when its replay cache is full.
func WriteUnavailable(w http.ResponseWriter, detail string, retryAfter time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(retryAfter.Seconds())), 10))
	WriteProblem(w, &Problem{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Detail: detail})
}

// WriteSignatureError answers 401 with Signature-Error and a problem body
// naming the same code, with a fixed sentence for the detail (e's own
// detail may quote what the peer sent: it is for the caller's logs).
func WriteSignatureError(w http.ResponseWriter, e *SignatureError) {
	w.Header().Set(httpsig.HeaderSignatureError, e.Header())
	if e.Code == httpsig.CodeUnsupportedAlgorithm {
		w.Header().Set("Accept-Signature-Alg", "Ed25519")
	}
	WriteProblem(w, &Problem{Status: http.StatusUnauthorized, Code: string(e.Code), Detail: signatureDetail(e.Code)})
}

// signatureDetail is the fixed sentence a peer gets for a code: the error's
// own detail may quote attacker-chosen input and is for the logs.
func signatureDetail(c httpsig.Code) string {
	switch c {
	case httpsig.CodeInvalidJWT:
		return "the token in Signature-Key is not acceptable here"
	case httpsig.CodeExpiredJWT:
		return "the token in Signature-Key has expired"
	case httpsig.CodeRevokedJWT:
		return "the token in Signature-Key has been revoked"
	case httpsig.CodeClockSkew:
		return "the signature's created time is ahead of this server's clock"
	case httpsig.CodeInvalidKey, httpsig.CodeUnknownKey:
		return "the token's signing key could not be resolved"
	case httpsig.CodeIssuerMismatch, httpsig.CodeIssuerMissing:
		return "the token issuer's metadata does not name that issuer"
	case httpsig.CodeInvalidInput:
		return "the signature does not cover the required components"
	case httpsig.CodeReplayedRequest:
		return "this signature was already accepted, or made before this server started: sign the request again"
	}
	return "the HTTP message signature was refused"
}

// Thumbprint is the RFC 7638 thumbprint of an Ed25519 JWK, as a resource
// token's agent_jkt carries it.
func Thumbprint(j JWK) string { return identity.Thumbprint(j) }
