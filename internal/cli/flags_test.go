package cli

import (
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestIDFlag(t *testing.T) {
	for _, c := range []struct {
		in    string
		roots bool
		want  kin.AgentID
		ok    bool
	}{
		{"7", false, 7, true},
		{"#7", false, 7, true},
		{"0", false, 0, false},
		{"0", true, 0, true},
		{"#0", true, 0, true},
		{"-1", true, 0, false},
		{"abc", true, 0, false},
		{"", true, 0, false},
		{"1.5", false, 0, false},
	} {
		var id kin.AgentID = 99
		err := idFlag{id: &id, roots: c.roots}.Set(c.in)
		if (err == nil) != c.ok || c.ok && id != c.want {
			t.Errorf("Set(%q, roots=%v) = %d, %v", c.in, c.roots, id, err)
		}
	}
}

func TestEnumFlag(t *testing.T) {
	var s kin.Status
	f := newEnumFlag(&s, allStatuses...)
	if err := f.Set("suspended"); err != nil || s != kin.StatusSuspended || f.String() != "suspended" {
		t.Errorf("Set(suspended): %v, %q", err, s)
	}
	if err := f.Set("sleeping"); err == nil || s != kin.StatusSuspended {
		t.Errorf("Set(sleeping): %v, %q", err, s)
	}
}

func TestNonNegFlag(t *testing.T) {
	var n int64
	f := nonNegFlag{n: &n}
	for in, ok := range map[string]bool{"0": true, "42": true, "-1": false, "x": false, "": false} {
		if err := f.Set(in); (err == nil) != ok {
			t.Errorf("Set(%q) = %v", in, err)
		}
	}
}

func TestKVString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        "plain",
		"":             `""`,
		"two words":    `"two words"`,
		`say "hi"`:     `"say \"hi\""`,
		"a=b":          `"a=b"`,
		"tab\there":    `"tab\there"`,
		"Trader@ex:1":  "Trader@ex:1",
		"Müller-Lüdin": "Müller-Lüdin",
	} {
		if got := kvString(in); got != want {
			t.Errorf("kvString(%q) = %s, want %s", in, got, want)
		}
	}
}
