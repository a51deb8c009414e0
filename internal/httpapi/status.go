package httpapi

import (
	"net/http"

	"github.com/kin-agents/kin/kin"
)

// statusOf is the one table from error codes to HTTP statuses; the client
// reads the code from the body, so the status is for humans and proxies.
var statusOf = map[kin.ErrorCode]int{
	kin.ECodeInvalid:           http.StatusBadRequest,
	kin.ECodeNotFound:          http.StatusNotFound,
	kin.ECodeConflict:          http.StatusConflict,
	kin.ECodeInvalidTransition: http.StatusConflict,
	kin.ECodeUnauthorized:      http.StatusUnauthorized,
	kin.ECodeForbidden:         http.StatusForbidden,
	kin.ECodeInternal:          http.StatusInternalServerError,
	kin.ECodeUnavailable:       http.StatusServiceUnavailable,
	kin.ECodeParentNotFound:    http.StatusUnprocessableEntity,
	kin.ECodeParentNotActive:   http.StatusConflict,
	kin.ECodeSpawnDepth:        http.StatusForbidden,
	kin.ECodeWalletTaken:       http.StatusConflict,
	kin.ECodeMaxChildren:       http.StatusConflict,
	kin.ECodeSpawnNotAllowed:   http.StatusForbidden,
	kin.ECodeCardinality:       http.StatusConflict,
	kin.ECodeCircuitOpen:       http.StatusTooManyRequests,
	kin.ECodeRateLimited:       http.StatusTooManyRequests,
	// Not 408: that says the request itself came too slowly, and clients
	// may repeat it unasked. 504 says the answer waited for did not come in
	// time, which is what a wait's timeout is.
	kin.ECodeTimeout: http.StatusGatewayTimeout,
	// The permission authority's refusals: the caller is known, and what
	// it asked for exceeds what it holds.
	kin.ECodeEscalation: http.StatusForbidden,
	kin.ECodeDenied:     http.StatusForbidden,
	kin.ECodeBudget:     http.StatusForbidden,
	// Not 503: that says kin is unavailable for now, and clients and
	// proxies retry it (the SDK reads a bare 503 as "kin not reachable").
	// A host without Landlock stays without it: the request is well formed
	// and understood, but its mounts cannot be enforced here, which is
	// what 422 says. Asking again changes nothing; asking without mounts,
	// or on a host that has Landlock, does.
	kin.ECodeSandbox: http.StatusUnprocessableEntity,
}

// StatusOf returns the HTTP status for an error code (500 for unknown ones).
func StatusOf(code kin.ErrorCode) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}
