package gateway

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/kin-agents/kin/kin"
)

// apiError is a refusal in the provider's own error shape, so that the
// agent's SDK surfaces it as it would the provider's:
//
//	OpenAI:    {"error": {"message", "type", "code"}}
//	Anthropic: {"type": "error", "error": {"type", "message", "code"}}
//
// with kin's error code as code (Anthropic's shape has no code: kin adds
// it beside type and message, which its SDKs ignore).
type apiError struct {
	status int
	code   kin.ErrorCode
	msg    string
	// retryAfter, in seconds, is when a rate_limited call may be made
	// again (sent as Retry-After and retry-after-ms, which the SDKs
	// honour).
	retryAfter float64
	// noRetry: a 5xx that retrying does not mend (the upstream refused
	// the operator's key), sent with X-Should-Retry: false as every 4xx is.
	noRetry bool
}

// apiErrorOf maps a kin error to its status: budget_exhausted 429,
// permission_denied 403, not_found 404, others 500 with a generic message.
func apiErrorOf(err error) *apiError {
	code := kin.ErrorCodeOf(err)
	e := &apiError{code: code, msg: kin.ErrorMessageOf(err)}
	var ke *kin.Error
	if errors.As(err, &ke) {
		e.retryAfter = ke.RetryAfter
	}
	switch code {
	case kin.ECodeBudget, kin.ECodeRateLimited:
		e.status = http.StatusTooManyRequests
	case kin.ECodeDenied, kin.ECodeForbidden:
		e.status = http.StatusForbidden
	case kin.ECodeNotFound:
		e.status = http.StatusNotFound
	case kin.ECodeInvalid:
		e.status = http.StatusBadRequest
	case kin.ECodeUnauthorized:
		e.status = http.StatusUnauthorized
	default:
		e.status = http.StatusInternalServerError
	}
	return e
}

func (e *apiError) typeFor(api API) string {
	switch e.status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		if api == Anthropic {
			return "request_too_large"
		}
		return "invalid_request_error"
	case http.StatusTooManyRequests:
		if api == OpenAI && e.code == kin.ECodeBudget {
			return "insufficient_quota" // OpenAI's type for a spent quota
		}
		return "rate_limit_error"
	}
	return "api_error"
}

func (e *apiError) write(w http.ResponseWriter, api API) {
	typ := e.typeFor(api)
	var body any
	if api == Anthropic {
		body = map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": e.msg, "code": string(e.code)}}
	} else {
		body = map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "code": string(e.code), "param": nil}}
	}
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	// The official SDKs retry 429 and 5xx unless told not to: a refusal
	// by kin does not change by retrying soon, but a rate limit's does,
	// after the wait it names.
	if e.code == kin.ECodeRateLimited {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(e.retryAfter))))
		h.Set("Retry-After-Ms", strconv.Itoa(int(math.Ceil(e.retryAfter*1000))))
	} else if e.status < 500 || e.noRetry {
		h.Set("X-Should-Retry", "false")
	}
	h.Set("Kin-Error-Code", string(e.code))
	w.WriteHeader(e.status)
	w.Write(append(b, '\n'))
}
