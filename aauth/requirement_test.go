package aauth

import (
	"maps"
	"net/http"
	"testing"
)

func TestParseRequirement(t *testing.T) {
	for _, tt := range []struct {
		in     string
		req    string
		params map[string]string
		bad    bool
	}{
		{in: "requirement=agent-token", req: "agent-token", params: map[string]string{}},
		{in: `requirement=auth-token; resource-token="eyJ.a.b"`, req: "auth-token", params: map[string]string{"resource-token": "eyJ.a.b"}},
		{in: `requirement=auth-token;resource-token="x";future=1;flag;tok=abc`, req: "auth-token", params: map[string]string{"resource-token": "x", "tok": "abc"}},
		{in: `other=1, requirement=auth-token; resource-token="x", more="y"`, req: "auth-token", params: map[string]string{"resource-token": "x"}},
		{in: `requirement=interaction; url="https://ps.example/i?c=1"; code="ABCD"`, req: "interaction", params: map[string]string{"url": "https://ps.example/i?c=1", "code": "ABCD"}},
		{in: `requirement="auth-token"`, bad: true},
		{in: `requirement=(auth-token)`, bad: true},
		{in: `requirement=1`, bad: true},
		{in: `resource-token="x"`, bad: true},
		{in: ``, bad: true},
		{in: `requirement=auth-token; resource-token="unterminated`, bad: true},
		{in: `requirement=auth-token;;`, bad: true},
		{in: `Requirement=auth-token`, bad: true},
	} {
		req, params, err := ParseRequirement(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("%q: accepted as %q %v", tt.in, req, params)
			}
			continue
		}
		if err != nil || req != tt.req || !maps.Equal(params, tt.params) {
			t.Errorf("%q: got %q %v %v, want %q %v", tt.in, req, params, err, tt.req, tt.params)
		}
	}
}

func TestResourceToken(t *testing.T) {
	h := http.Header{}
	if _, ok := ResourceToken(h); ok {
		t.Fatal("empty header")
	}
	h.Set(HeaderRequirement, "requirement=agent-token")
	if _, ok := ResourceToken(h); ok {
		t.Fatal("agent-token requirement")
	}
	v, err := formatRequirement(RequirementAuthToken, map[string]string{"resource-token": "a.b.c"})
	if err != nil {
		t.Fatal(err)
	}
	if v != `requirement=auth-token;resource-token="a.b.c"` {
		t.Fatalf("formatted %q", v)
	}
	h.Set(HeaderRequirement, v)
	if rt, ok := ResourceToken(h); !ok || rt != "a.b.c" {
		t.Fatalf("got %q %v", rt, ok)
	}
}

// FuzzParseRequirement: no input panics, and whatever is accepted
// round-trips through formatRequirement to the same requirement and params.
func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{
		"requirement=agent-token",
		`requirement=auth-token; resource-token="eyJ.a.b"`,
		`a=1, requirement=interaction;url="https://x/?y=\"z\"";n=2;t=tok`,
		`requirement=auth-token;resource-token=?1`,
		`requirement=*tok/en:x;k="\\"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		req, params, err := ParseRequirement(in)
		if err != nil {
			return
		}
		out, err := formatRequirement(req, params)
		if err != nil {
			t.Fatalf("%q parsed to %q %v, which does not format: %v", in, req, params, err)
		}
		req2, params2, err := ParseRequirement(out)
		if err != nil || req2 != req || !maps.Equal(params, params2) {
			t.Fatalf("%q -> %q -> %q %v %v", in, out, req2, params2, err)
		}
	})
}
