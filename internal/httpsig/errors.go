package httpsig

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dunglas/httpsfv"
)

// Code is a Signature-Error code (draft-hardt-httpbis-signature-key, "Error
// Codes", as used by draft-hardt-oauth-aauth-protocol).
type Code string

// The Signature-Error codes.
const (
	CodeInvalidRequest       Code = "invalid_request"
	CodeInvalidInput         Code = "invalid_input"
	CodeInvalidSignature     Code = "invalid_signature"
	CodeUnsupportedAlgorithm Code = "unsupported_algorithm"
	CodeUnsupportedScheme    Code = "unsupported_scheme"
	CodeInvalidKey           Code = "invalid_key"
	CodeUnknownKey           Code = "unknown_key"
	CodeIssuerMissing        Code = "issuer_missing"
	CodeIssuerMismatch       Code = "issuer_mismatch"
	CodeInvalidJWT           Code = "invalid_jwt"
	CodeExpiredJWT           Code = "expired_jwt"
	CodeRevokedJWT           Code = "revoked_jwt"
	CodeClockSkew            Code = "clock_skew"
	CodeCacheMiss            Code = "cache_miss"
	// CodeReplayedRequest is kin's: the signature was already accepted
	// (Replays). It is not in the draft's registry.
	CodeReplayedRequest Code = "replayed_request"
)

// Error is a rejected signature: Code is what the peer is told, Detail is for
// logs only.
type Error struct {
	Code   Code
	Detail string
	// RequiredInput lists the components the verifier requires; rendered as
	// required_input for CodeInvalidInput.
	RequiredInput []string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "httpsig: " + string(e.Code)
	}
	return "httpsig: " + string(e.Code) + ": " + e.Detail
}

// Is matches another *Error with the same code, so errors.Is(err,
// &Error{Code: CodeClockSkew}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Header renders the Signature-Error response header value: an RFC 8941
// Dictionary whose error member is a Token, plus required_input (an Inner List
// of Strings) for invalid_input. For unsupported_algorithm the draft has the
// server send Accept-Signature-Alg: Ed25519 beside it.
func (e *Error) Header() string {
	d := httpsfv.NewDictionary()
	code := string(e.Code)
	if code == "" || !validToken(code) {
		code = string(CodeInvalidSignature)
	}
	d.Add("error", httpsfv.NewItem(httpsfv.Token(code)))
	if e.Code == CodeInvalidInput && len(e.RequiredInput) > 0 {
		il := httpsfv.InnerList{Params: httpsfv.NewParams()}
		for _, c := range e.RequiredInput {
			il.Items = append(il.Items, httpsfv.NewItem(c))
		}
		d.Add("required_input", il)
	}
	s, err := httpsfv.Marshal(d)
	if err != nil {
		return "error=" + code
	}
	return s
}

func validToken(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz_") == ""
}

func errorf(code Code, detail string) *Error { return &Error{Code: code, Detail: detail} }

// MaxDetail is how much of a detail a refusal writes to a log, an event or
// an answer.
const MaxDetail = 200

// BoundDetail is detail cut to MaxDetail bytes (at a character's start),
// then an ellipsis and its whole length. A detail may quote what the
// request sent (a Signature-Key scheme of a megabyte, a token's claim):
// whoever reads it needs the start, and the sender must not choose the
// size of what kin writes.
func BoundDetail(detail string) string {
	if len(detail) <= MaxDetail {
		return detail
	}
	cut := MaxDetail
	for cut > 0 && !utf8.RuneStart(detail[cut]) {
		cut--
	}
	return detail[:cut] + "… (" + strconv.Itoa(len(detail)) + " bytes)"
}
