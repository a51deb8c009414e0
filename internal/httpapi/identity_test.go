package httpapi_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// The identity routes' queries are read as strictly as the others': an
// unknown or repeated parameter is an error that names it.
func TestIdentityQueries(t *testing.T) {
	if id, err := httpapi.ParseGrantsQuery(url.Values{"agent": {"7"}}); err != nil || id != 7 {
		t.Fatalf("agent=7: %v, %v", id, err)
	}
	if f, err := httpapi.ParseAuthTokensQuery(url.Values{"agent": {"3"}, "expired": {"true"}}); err != nil || f != (kin.AuthTokenFilter{Agent: 3, Expired: true}) {
		t.Fatalf("agent=3&expired=true: %+v, %v", f, err)
	}
	for _, tc := range []struct {
		q    string
		want string
	}{
		{"agnet=7", `unknown query parameter "agnet" (known: agent)`},
		{"agent=7&agent=8", `"agent" is given 2 times`},
		{"agent=x", "x"},
	} {
		q, _ := url.ParseQuery(tc.q)
		if _, err := httpapi.ParseGrantsQuery(q); kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("grants ?%s: %v; want invalid naming %q", tc.q, err, tc.want)
		}
	}
	for _, tc := range []struct {
		q    string
		want string
	}{
		{"expired=maybe", `expired "maybe" is not true or false`},
		{"state=revoked", `unknown query parameter "state" (known: agent, expired)`},
	} {
		q, _ := url.ParseQuery(tc.q)
		if _, err := httpapi.ParseAuthTokensQuery(q); kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("auth-tokens ?%s: %v; want invalid naming %q", tc.q, err, tc.want)
		}
	}
}
