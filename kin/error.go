package kin

import (
	"errors"
	"fmt"
)

// ErrorCode names a class of failure. Codes are a contract with clients and
// scripts: add new ones, never rename or reuse one.
type ErrorCode string

// Error codes. The governor's rule codes come from the seeds and the issues.
const (
	ECodeInvalid           ErrorCode = "invalid"              // bad input: flags, JSON, names, sizes
	ECodeNotFound          ErrorCode = "not_found"            // no such agent or resource
	ECodeConflict          ErrorCode = "conflict"             // the name or another unique value is taken
	ECodeInvalidTransition ErrorCode = "invalid_transition"   // a status change that the current status does not allow
	ECodeUnauthorized      ErrorCode = "unauthorized"         // no or wrong credentials
	ECodeForbidden         ErrorCode = "forbidden"            // the caller may not act on that agent
	ECodeInternal          ErrorCode = "internal"             // a bug or a broken store; details are in the daemon's log
	ECodeUnavailable       ErrorCode = "unavailable"          // the daemon is shutting down or not reachable
	ECodeParentNotFound    ErrorCode = "parent_not_found"     // seed 000
	ECodeParentNotActive   ErrorCode = "parent_not_active"    // seed 000
	ECodeSpawnDepth        ErrorCode = "spawn_depth_exceeded" // seed 000 and 002
	ECodeWalletTaken       ErrorCode = "wallet_taken"         // seed 000
	ECodeMaxChildren       ErrorCode = "max_children_exceeded"
	ECodeSpawnNotAllowed   ErrorCode = "spawn_not_allowed"
	ECodeCardinality       ErrorCode = "cardinality_exceeded"
	ECodeCircuitOpen       ErrorCode = "spawn_circuit_open" // seed 002's circuit breaker has tripped for this parent
	ECodeTimeout           ErrorCode = "timeout"            // a wait ran out of time; nothing changed
	// ECodeRateLimited refuses an agent's request past its quota (the
	// profile's quotas): nothing was written; Error.RetryAfter says when
	// the next one of its kind is allowed.
	ECodeRateLimited ErrorCode = "rate_limited"
)

// Error is the error every kin boundary speaks: the API sends it as
// {"code": "...", "message": "..."} and the client turns it back into this.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// RetryAfter, in seconds, is when a rate_limited request of the same
	// kind would be allowed (HTTP also sends it as Retry-After, rounded up).
	RetryAfter float64 `json:"retry_after,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCodeOf returns the code of err if it is or wraps an *Error, and
// ECodeInternal for any other non-nil error.
func ErrorCodeOf(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ECodeInternal
}

// ErrorMessageOf returns the message of err if it is or wraps an *Error, and a
// generic message otherwise: internal details are not for clients.
func ErrorMessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
