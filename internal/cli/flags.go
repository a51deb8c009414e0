package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

// idFlag is a flag holding an agent id. With roots, 0 is accepted and
// means "no parent".
type idFlag struct {
	id    *kin.AgentID
	roots bool
}

func (f idFlag) String() string {
	if f.id == nil || *f.id == 0 {
		return ""
	}
	return f.id.String()
}

func (f idFlag) Set(s string) error {
	if f.roots && (s == "0" || s == "#0") {
		*f.id = 0
		return nil
	}
	id, err := kin.ParseAgentID(s)
	if err != nil {
		if f.roots {
			return fmt.Errorf("not an agent id: use a positive integer such as 7 (or 0 for roots)")
		}
		return fmt.Errorf("not an agent id: use a positive integer such as 7")
	}
	*f.id = id
	return nil
}

func (f idFlag) Type() string { return "ID" }

// enumFlag is a string flag that accepts only the given values.
type enumFlag struct {
	get     func() string
	set     func(string)
	allowed []string
}

func newEnumFlag[T ~string](p *T, allowed ...T) enumFlag {
	s := make([]string, len(allowed))
	for i, v := range allowed {
		s[i] = string(v)
	}
	return enumFlag{
		get:     func() string { return string(*p) },
		set:     func(v string) { *p = T(v) },
		allowed: s,
	}
}

func (f enumFlag) String() string { return f.get() }

func (f enumFlag) Set(s string) error {
	if !slices.Contains(f.allowed, s) {
		return fmt.Errorf("must be one of %s", strings.Join(f.allowed, ", "))
	}
	f.set(s)
	return nil
}

func (f enumFlag) Type() string { return "string" }

// nonNegFlag is an integer flag that refuses negative values.
type nonNegFlag struct{ n *int64 }

func (f nonNegFlag) String() string { return strconv.FormatInt(*f.n, 10) }

func (f nonNegFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("not a whole number")
	}
	*f.n = n
	return nil
}

func (f nonNegFlag) Type() string { return "N" }

// Every status and every state, for flag validation and help texts.
var (
	allStatuses = []kin.Status{kin.StatusActive, kin.StatusSuspended, kin.StatusRevoked, kin.StatusTerminated}
	allStates   = []kin.State{
		kin.StateRegistered, kin.StateActive, kin.StateStale, kin.StateOffline, kin.StateSuspended,
		kin.StateStopping, kin.StateCancelled, kin.StateExited, kin.StateFailed, kin.StateTerminated,
	}
)

func joinStrings[T ~string](vs []T) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// durationFlag is a duration flag that refuses negative values. It stays nil
// unless given, so that "not given" and "0s" differ.
type durationFlag struct{ d **kin.Duration }

func (f durationFlag) String() string {
	if f.d == nil || *f.d == nil {
		return ""
	}
	return time.Duration(**f.d).String()
}

func (f durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("not a duration: use e.g. 0s, 500ms, 10s or 1m30s")
	}
	d := kin.Duration(v)
	*f.d = &d
	return nil
}

func (f durationFlag) Type() string { return "DUR" }
