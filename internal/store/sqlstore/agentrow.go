package sqlstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/jsonlist"
	"github.com/kin-agents/kin/kin"
)

// Agents are read as one text value a row rather than eighteen columns:
// modernc.org/sqlite takes a connection mutex on every column call, and for
// bulk reads (a 10,000-agent subtree) those calls were a third of the time.
// The packed form is "<int>," for integers and "<byte length>:<bytes>" for
// text, so any content survives, separators included.

type colKind int

const (
	colInt colKind = iota
	colText
)

// column is a column of a packed row: its SQL and kind, and the name
// Reader.AgentRowFields gives it (kin.Agent's JSON name; exit_state,
// exit_code and exit_signal make up Exit).
type column struct {
	name  string
	kind  colKind
	field string
}

// agentCols are the agents table's columns in the order scanAgent reads.
var agentCols = []column{
	{"id", colInt, "id"}, {"name", colText, "name"}, {"role", colText, "role"}, {"parent_id", colInt, "parent"},
	{"generation", colInt, "generation"}, {"responsible", colText, "responsible"},
	{"COALESCE(a.wallet, '')", colText, "wallet"}, {"constitution_hash", colText, "constitution_hash"},
	{"capability_hash", colText, "capability_hash"}, {"scope", colText, "scope"},
	{"self_modifying", colInt, "self_modifying"}, {"life", colText, "life"},
	{"status", colText, "status"}, {"state", colText, "state"}, {"created_at", colInt, "created_at"},
	{"created_by", colText, "created_by"}, {"updated_at", colInt, "updated_at"},
	{"spawn_blocked_until", colInt, "spawn_blocked_until"},
	{"pid", colInt, "pid"}, {"command", colText, "command"}, {"restart", colText, "restart"},
	{"grace", colInt, "grace"}, {"started_at", colInt, "started_at"},
	{"ended_at", colInt, "ended_at"}, {"exit_state", colInt, "exit_state"}, {"exit_code", colInt, "exit_code"},
	{"exit_signal", colText, "exit_signal"}, {"end_reason", colText, "end_reason"}, {"replaces", colInt, "replaces"},
	{"cursor", colText, "cursor"}, {"last_heartbeat", colInt, "last_heartbeat"},
	{"session", colText, "session"}, {"result", colText, "result"}, {"stage", colText, "stage"},
	{"host", colText, "host"}, {"requested_by", colInt, "requested_by"},
}

// agentColumns is the packed row, read from the agents table aliased "a".
var agentColumns = packColumns(agentCols)

// agentRowFields names agentCols' fields in order (Reader.AgentRowFields).
var agentRowFields = func() []string {
	out := make([]string, len(agentCols))
	for i, c := range agentCols {
		out[i] = c.field
	}
	return out
}()

// agentLeanCols are the columns a cancellation reads of each agent
// (Reader.AgentListLeanByIDs), in the order unpackLean reads them.
var agentLeanCols = []column{
	{"id", colInt, "id"}, {"parent_id", colInt, "parent"}, {"life", colText, "life"}, {"status", colText, "status"},
	{"state", colText, "state"}, {"pid", colInt, "pid"}, {"command", colText, "command"}, {"grace", colInt, "grace"},
	{"ended_at", colInt, "ended_at"}, {"result", colText, "result"}, {"host", colText, "host"},
}

// agentLeanColumns is the packed lean row, from the agents table aliased "a".
var agentLeanColumns = packColumns(agentLeanCols)

// packColumns is the SQL of cols packed into one text value.
func packColumns(cols []column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		col := c.name
		if !strings.Contains(col, "(") {
			col = "a." + col
		}
		if c.kind == colInt {
			parts[i] = col + ", ','"
		} else {
			parts[i] = "octet_length(" + col + "), ':', " + col
		}
	}
	return "concat(" + strings.Join(parts, ", ") + ")"
}

type scanner interface{ Scan(dest ...any) error }

func scanAgent(row scanner) (*kin.Agent, error) {
	var packed string
	if err := row.Scan(&packed); err != nil {
		return nil, err
	}
	return unpackAgent(packed)
}

// rowReader takes a packed row apart.
type rowReader struct {
	s   string
	err error
}

func (r *rowReader) int() int64 {
	if r.err != nil {
		return 0
	}
	i := strings.IndexByte(r.s, ',')
	if i < 0 {
		r.err = fmt.Errorf("store: malformed agent row: no integer at %q", r.s)
		return 0
	}
	n, err := strconv.ParseInt(r.s[:i], 10, 64)
	if err != nil {
		r.err = fmt.Errorf("store: malformed agent row: %v", err)
	}
	r.s = r.s[i+1:]
	return n
}

func (r *rowReader) text() string {
	if r.err != nil {
		return ""
	}
	i := strings.IndexByte(r.s, ':')
	if i < 0 {
		r.err = fmt.Errorf("store: malformed agent row: no text at %q", r.s)
		return ""
	}
	n, err := strconv.Atoi(r.s[:i])
	if err != nil || n < 0 || i+1+n > len(r.s) {
		r.err = fmt.Errorf("store: malformed agent row: bad text length %q", r.s[:i])
		return ""
	}
	v := r.s[i+1 : i+1+n]
	r.s = r.s[i+1+n:]
	return v
}

// unixTime turns stored nanoseconds into a time, 0 into the zero time.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// nanos is unixTime's inverse.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unpackAgent(packed string) (*kin.Agent, error) {
	r := &rowReader{s: packed}
	a := &kin.Agent{
		ID:               kin.AgentID(r.int()),
		Name:             r.text(),
		Role:             r.text(),
		Parent:           kin.AgentID(r.int()),
		Generation:       int(r.int()),
		Responsible:      r.text(),
		Wallet:           r.text(),
		ConstitutionHash: r.text(),
		CapabilityHash:   r.text(),
		Scope:            r.text(),
		SelfModifying:    r.int() != 0,
		Life:             kin.Life(r.text()),
		Status:           kin.Status(r.text()),
		State:            kin.State(r.text()),
		CreatedAt:        time.Unix(0, r.int()).UTC(),
		CreatedBy:        r.text(),
		UpdatedAt:        time.Unix(0, r.int()).UTC(),
	}
	a.SpawnBlockedUntil = unixTime(r.int())
	a.PID = int(r.int())
	r.command(a)
	a.Restart = kin.RestartPolicy(r.text())
	a.Grace = kin.Duration(r.int())
	a.StartedAt = unixTime(r.int())
	a.EndedAt = unixTime(r.int())
	exitState, code, signal := r.int(), int(r.int()), r.text()
	if exitState != 0 {
		a.Exit = &kin.Exit{Code: code, Signal: signal, Known: exitState == 1}
	}
	a.EndReason = r.text()
	a.Replaces = kin.AgentID(r.int())
	a.Cursor = r.text()
	a.LastHeartbeat = unixTime(r.int())
	a.Session = r.text()
	a.Result = kin.ResultStatus(r.text())
	a.Stage = r.text()
	a.Host = r.text()
	a.RequestedBy = kin.AgentID(r.int())
	if r.err == nil && r.s != "" {
		r.err = fmt.Errorf("store: malformed agent row: %d bytes left over", len(r.s))
	}
	if r.err != nil {
		return nil, r.err
	}
	return a, nil
}

// unpackLean takes a lean row (agentLeanColumns) apart: only those fields
// of the agent are set.
func unpackLean(packed string) (*kin.Agent, error) {
	r := &rowReader{s: packed}
	a := &kin.Agent{
		ID:     kin.AgentID(r.int()),
		Parent: kin.AgentID(r.int()),
		Life:   kin.Life(r.text()),
		Status: kin.Status(r.text()),
		State:  kin.State(r.text()),
		PID:    int(r.int()),
	}
	r.command(a)
	a.Grace = kin.Duration(r.int())
	a.EndedAt = unixTime(r.int())
	a.Result = kin.ResultStatus(r.text())
	a.Host = r.text()
	if r.err == nil && r.s != "" {
		r.err = fmt.Errorf("store: malformed agent row: %d bytes left over", len(r.s))
	}
	if r.err != nil {
		return nil, r.err
	}
	return a, nil
}

// keepLean cuts a whole row, in place, to what unpackLean would have made
// of it: its lean fields, the others zero (Reader.AgentListLeanByIDs).
func keepLean(a *kin.Agent) {
	*a = kin.Agent{
		ID: a.ID, Parent: a.Parent, Life: a.Life, Status: a.Status, State: a.State, PID: a.PID,
		Command: a.Command, Grace: a.Grace, EndedAt: a.EndedAt, Result: a.Result, Host: a.Host,
	}
}

// command reads the next field, a command (jsonList's JSON array, "" for
// none), into a.
func (r *rowReader) command(a *kin.Agent) {
	cmd := r.text()
	if cmd == "" || r.err != nil {
		return
	}
	l, err := jsonlist.Parse(cmd)
	if err != nil {
		r.err = fmt.Errorf("store: agent %d command: %w", a.ID, err)
		return
	}
	a.Command = l
}
