package kin_test

import (
	"strings"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestParseNameAcceptsSeedGrammar(t *testing.T) {
	tests := []struct {
		name, role, context string
		sep                 byte
	}{
		{"GO", "GO", "", 0},
		{"HO@Server1", "HO", "Server1", '@'},
		{"HO@MacStudio", "HO", "MacStudio", '@'},
		{"PO-MVP1", "PO", "MVP1", '-'},
		{"PO-XIOPro", "PO", "XIOPro", '-'},
		{"IO@Shai", "IO", "Shai", '@'},
		{"coder", "coder", "", 0},
		{"rev-123", "rev", "123", '-'},
		{"S:backend:a3f9", "S:backend:a3f9", "", 0},
		{"W:b2c1", "W:b2c1", "", 0},
		{"HO@host.example", "HO", "host.example", '@'},
		{"Data_Collector", "Data_Collector", "", 0},
		{"a", "a", "", 0},
		{strings.Repeat("x", kin.MaxNameLen), strings.Repeat("x", kin.MaxNameLen), "", 0},
	}
	for _, tt := range tests {
		n, err := kin.ParseName(tt.name)
		if err != nil {
			t.Errorf("ParseName(%q): %v", tt.name, err)
			continue
		}
		if n.Full != tt.name || n.Role != tt.role || n.Context != tt.context || n.Sep != tt.sep {
			t.Errorf("ParseName(%q) = %+v, want role %q context %q sep %q", tt.name, n, tt.role, tt.context, tt.sep)
		}
	}
}

func TestParseNameRejectsBadNames(t *testing.T) {
	tests := []struct{ name, want string }{
		{"", "empty"},
		{strings.Repeat("x", kin.MaxNameLen+1), "at most 64"},
		{"-lead", "start with"},
		{"trail-", "end with"},
		{"a..b", "two separators"},
		{"../etc", "start with"},
		{"a/b", `"/"`},
		{"planner+search1", `"+"`},
		{"two@at@signs", "more than one '@'"},
		{"sp ace", `" "`},
		{"new\nline", "0x0a"},
		{"nul\x00", "0x00"},
		{"ünï", "0xc3"},
		{".hidden", "start with"},
	}
	for _, tt := range tests {
		_, err := kin.ParseName(tt.name)
		if err == nil {
			t.Errorf("ParseName(%q) accepted a bad name", tt.name)
			continue
		}
		if kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseName(%q) = %v, want an invalid error mentioning %q", tt.name, err, tt.want)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"GO", "HO@Server1", "PO-MVP1", "IO@Shai", "rev-123", "a..b", "@x", "x@", "S:a:b", "a/b", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := kin.ParseName(s)
		if err != nil {
			if kin.ErrorCodeOf(err) != kin.ECodeInvalid {
				t.Fatalf("ParseName(%q) error %v is not an invalid error", s, err)
			}
			return
		}
		// An accepted name is safe as a file name and splits losslessly.
		if len(s) == 0 || len(s) > kin.MaxNameLen || strings.ContainsAny(s, "/+\x00 ") || strings.Contains(s, "..") || s[0] == '.' {
			t.Fatalf("ParseName accepted %q", s)
		}
		rebuilt := n.Role
		if n.Sep != 0 {
			rebuilt += string(n.Sep) + n.Context
		}
		if rebuilt != s {
			t.Fatalf("ParseName(%q) split into %+v, which does not rebuild the name", s, n)
		}
	})
}

func TestRegisterRequestValidate(t *testing.T) {
	ok := kin.RegisterRequest{Name: "coder", Responsible: "Dr. Schmidt"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	tests := []struct {
		mutate func(*kin.RegisterRequest)
		want   string
	}{
		{func(r *kin.RegisterRequest) { r.Name = "" }, "name is empty"},
		{func(r *kin.RegisterRequest) { r.Responsible = "" }, "responsible is required"},
		{func(r *kin.RegisterRequest) { r.Parent = -1 }, "parent -1"},
		{func(r *kin.RegisterRequest) { r.Life = "forever" }, `life "forever"`},
		{func(r *kin.RegisterRequest) { r.Role = "PO-x" }, "role"},
		{func(r *kin.RegisterRequest) { r.Scope = strings.Repeat("s", kin.MaxScopeLen+1) }, "scope is 4097 bytes"},
		{func(r *kin.RegisterRequest) { r.Wallet = strings.Repeat("w", kin.MaxWalletLen+1) }, "wallet is"},
		{func(r *kin.RegisterRequest) { r.Responsible = "Dr.\x1bSchmidt" }, "responsible has a control character"},
		{func(r *kin.RegisterRequest) { r.Responsible = "bad\xffutf8" }, "responsible is not valid UTF-8"},
	}
	for _, tt := range tests {
		r := ok
		tt.mutate(&r)
		err := r.Validate()
		if err == nil || kin.ErrorCodeOf(err) != kin.ECodeInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want invalid mentioning %q", r, err, tt.want)
		}
	}
	child := kin.RegisterRequest{Name: "child", Parent: 1}
	if err := child.Validate(); err != nil {
		t.Errorf("a child may omit responsible (it inherits): %v", err)
	}
	multi := ok
	multi.Scope = "line one\nline two\ttabbed"
	if err := multi.Validate(); err != nil {
		t.Errorf("scope may span lines: %v", err)
	}
}

func TestStatusActionTransitions(t *testing.T) {
	tests := []struct {
		action kin.StatusAction
		from   kin.Status
		to     kin.Status
		ok     bool
	}{
		{kin.ActionSuspend, kin.StatusActive, kin.StatusSuspended, true},
		{kin.ActionSuspend, kin.StatusSuspended, kin.StatusSuspended, false},
		{kin.ActionSuspend, kin.StatusRevoked, kin.StatusSuspended, false},
		{kin.ActionResume, kin.StatusSuspended, kin.StatusActive, true},
		{kin.ActionResume, kin.StatusActive, kin.StatusActive, false},
		{kin.ActionResume, kin.StatusRevoked, kin.StatusActive, false},
		{kin.ActionRevoke, kin.StatusActive, kin.StatusRevoked, true},
		{kin.ActionRevoke, kin.StatusSuspended, kin.StatusRevoked, true},
		{kin.ActionRevoke, kin.StatusTerminated, kin.StatusRevoked, false},
		{kin.ActionTerminate, kin.StatusActive, kin.StatusTerminated, true},
		{kin.ActionTerminate, kin.StatusRevoked, kin.StatusTerminated, true},
		{kin.ActionTerminate, kin.StatusTerminated, kin.StatusTerminated, false},
	}
	for _, tt := range tests {
		to, ok := tt.action.Transition(tt.from)
		if ok != tt.ok || (ok && to != tt.to) {
			t.Errorf("%s from %s = %s, %v; want %s, %v", tt.action, tt.from, to, ok, tt.to, tt.ok)
		}
	}
}
