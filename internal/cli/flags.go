package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

// idFlag is a flag holding an agent: an id, or, when the flag belongs to an
// app, a live agent's name, resolved once the daemon is reached. With
// roots, 0 is accepted and means "no parent".
type idFlag struct {
	id    *kin.AgentID
	roots bool
	a     *app   // resolves names; nil accepts ids only
	name  string // the flag's name, for errors
}

// idFlag is an agent flag of a's command line.
func (a *app) idFlag(id *kin.AgentID, name string, roots bool) idFlag {
	return idFlag{id: id, roots: roots, a: a, name: name}
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
	if err == nil {
		*f.id = id
		return nil
	}
	if f.a != nil && isNameArg(s) {
		f.a.names = append(f.a.names, pendingName{flag: f.name, name: s, id: f.id})
		return nil
	}
	if f.roots {
		return fmt.Errorf("not an agent id or name: use a positive integer such as 7 (or 0 for roots), or a live agent's name")
	}
	return fmt.Errorf("not an agent id or name: use a positive integer such as 7, or a live agent's name")
}

// isNameArg says whether s may name an agent: a valid name that does not
// look like an id ("0", "-1" and "#3" are bad ids, not names).
func isNameArg(s string) bool {
	if _, err := kin.ParseName(s); err != nil {
		return false
	}
	return strings.TrimLeft(s, "0123456789") != ""
}

// pendingName is an agent flag given as a name, resolved by app.service.
type pendingName struct {
	flag, name string
	id         *kin.AgentID
}

// resolveNames sets every agent flag given as a name to its live agent's id.
func (a *app) resolveNames(ctx context.Context) error {
	names := a.names
	a.names = nil
	for _, p := range names {
		id, err := a.agentByName(ctx, p.name)
		if err != nil {
			return usageErrorf("--%s %s: %s", p.flag, p.name, kin.ErrorMessageOf(err))
		}
		*p.id = id
	}
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
