package identity_test

import (
	"testing"

	"github.com/kin-agents/kin/internal/httpsig"
	"github.com/kin-agents/kin/internal/identity"
)

// An external test package: importing httpsig here cannot form a cycle even
// if httpsig one day imports identity.
func TestCodesMatchHTTPSig(t *testing.T) {
	for _, c := range []struct {
		id identity.Code
		hs httpsig.Code
	}{
		{identity.CodeInvalidJWT, httpsig.CodeInvalidJWT},
		{identity.CodeExpiredJWT, httpsig.CodeExpiredJWT},
		{identity.CodeInvalidKey, httpsig.CodeInvalidKey},
	} {
		if string(c.id) != string(c.hs) {
			t.Errorf("%q != %q", c.id, c.hs)
		}
	}
}
