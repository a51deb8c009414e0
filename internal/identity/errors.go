package identity

// Code is an AAuth Signature-Error code. The strings are identical to those
// of internal/httpsig (not imported, to keep this package a leaf).
type Code string

// The codes this package returns.
const (
	CodeInvalidJWT Code = "invalid_jwt"
	CodeExpiredJWT Code = "expired_jwt"
	CodeInvalidKey Code = "invalid_key"
)

// Error is a refused or rejected token: Code is what a peer is told, Detail
// is for logs only.
type Error struct {
	Code   Code
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "identity: " + string(e.Code)
	}
	return "identity: " + string(e.Code) + ": " + e.Detail
}

// Is matches another *Error with the same code, so errors.Is(err,
// &Error{Code: CodeExpiredJWT}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func errf(c Code, detail string) *Error { return &Error{Code: c, Detail: detail} }
