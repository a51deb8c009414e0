package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// rowsFields are the fields the store's rows carry, in its order (the
// daemon's test TestTreeRowsMatchTheNestedJSON holds the store to them
// through a real daemon).
var rowsFields = []string{"id", "name", "role", "parent", "generation", "responsible", "wallet",
	"constitution_hash", "capability_hash", "scope", "self_modifying", "life", "status", "state",
	"created_at", "created_by", "updated_at", "spawn_blocked_until", "pid", "command", "restart", "grace",
	"started_at", "ended_at", "exit_state", "exit_code", "exit_signal", "end_reason", "replaces", "cursor",
	"last_heartbeat", "session", "result", "stage", "host", "requested_by"}

// rowOf is a's row in the form v2, as the store packs it.
func rowOf(t testing.TB, a *kin.Agent) string {
	t.Helper()
	var b strings.Builder
	num := func(v int64) { b.WriteString(strconv.FormatInt(v, 10) + ",") }
	text := func(v string) { b.WriteString(strconv.Itoa(len(v)) + ":" + v) }
	nanos := func(v interface{ UnixNano() int64 }, zero bool) {
		if zero {
			num(0)
		} else {
			num(v.UnixNano())
		}
	}
	for _, f := range rowsFields {
		switch f {
		case "id":
			num(int64(a.ID))
		case "name":
			text(a.Name)
		case "role":
			text(a.Role)
		case "parent":
			num(int64(a.Parent))
		case "generation":
			num(int64(a.Generation))
		case "responsible":
			text(a.Responsible)
		case "wallet":
			text(a.Wallet)
		case "constitution_hash":
			text(a.ConstitutionHash)
		case "capability_hash":
			text(a.CapabilityHash)
		case "scope":
			text(a.Scope)
		case "self_modifying":
			num(map[bool]int64{true: 1}[a.SelfModifying])
		case "life":
			text(string(a.Life))
		case "status":
			text(string(a.Status))
		case "state":
			text(string(a.State))
		case "created_at":
			num(a.CreatedAt.UnixNano())
		case "created_by":
			text(a.CreatedBy)
		case "updated_at":
			num(a.UpdatedAt.UnixNano())
		case "spawn_blocked_until":
			nanos(a.SpawnBlockedUntil, a.SpawnBlockedUntil.IsZero())
		case "pid":
			num(int64(a.PID))
		case "command":
			if len(a.Command) == 0 {
				text("")
			} else {
				js, err := json.Marshal(a.Command)
				if err != nil {
					t.Fatal(err)
				}
				text(string(js))
			}
		case "restart":
			text(string(a.Restart))
		case "grace":
			num(int64(a.Grace))
		case "started_at":
			nanos(a.StartedAt, a.StartedAt.IsZero())
		case "ended_at":
			nanos(a.EndedAt, a.EndedAt.IsZero())
		case "exit_state":
			switch {
			case a.Exit == nil:
				num(0)
			case a.Exit.Known:
				num(1)
			default:
				num(2)
			}
		case "exit_code":
			if a.Exit == nil {
				num(0)
			} else {
				num(int64(a.Exit.Code))
			}
		case "exit_signal":
			if a.Exit == nil {
				text("")
			} else {
				text(a.Exit.Signal)
			}
		case "end_reason":
			text(a.EndReason)
		case "replaces":
			num(int64(a.Replaces))
		case "cursor":
			text(a.Cursor)
		case "last_heartbeat":
			nanos(a.LastHeartbeat, a.LastHeartbeat.IsZero())
		case "session":
			text(a.Session)
		case "result":
			text(string(a.Result))
		case "stage":
			text(a.Stage)
		case "host":
			text(a.Host)
		case "requested_by":
			num(int64(a.RequestedBy))
		default:
			t.Fatalf("rowOf: no field %q", f)
		}
	}
	return b.String()
}

// rowsDoc is nodes (ascending ids) in the form v2.
func rowsDoc(t testing.TB, nodes ...*kin.TreeNode) string {
	t.Helper()
	head := map[string]any{"version": 2, "fields": rowsFields, "n": len(nodes), "reconciling": []kin.AgentID{}}
	spend := map[string][]any{"at": {}, "values": {}}
	for _, n := range nodes {
		if n.Spend != nil {
			spend["at"] = append(spend["at"], n.ID)
			spend["values"] = append(spend["values"], n.Spend)
		}
		if n.Reconciling {
			head["reconciling"] = append(head["reconciling"].([]kin.AgentID), n.ID)
		}
	}
	head["spend"] = spend
	js, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.Write(js)
	b.WriteByte('\n')
	for _, n := range nodes {
		row := rowOf(t, &n.Agent)
		b.WriteString(strconv.Itoa(len(row)) + ":" + row)
	}
	b.WriteByte('\n')
	return b.String()
}

// TestTreeRowsCarryEveryField: every field of kin.Agent and kin.TreeNode,
// set to a value that is not zero, comes back from the form v2 as the
// nested JSON would carry it; the agents are nested by their parents.
func TestTreeRowsCarryEveryField(t *testing.T) {
	var full kin.TreeNode
	fill(t, reflect.ValueOf(&full).Elem(), 1)
	full.ID, full.Parent, full.PID = 2, 1, 77 // ended (EndedAt is set)
	full.Reconciling = false                  // ended: not running, so never reconciling
	full.Children = []*kin.TreeNode{}
	var other kin.TreeNode
	fill(t, reflect.ValueOf(&other).Elem(), 40)
	other.ID, other.Parent, other.PID = 3, 1, 78
	other.Reconciling = false
	other.Children = []*kin.TreeNode{}
	at := full.CreatedAt // a stored agent's created_at and updated_at are always set
	running := &kin.TreeNode{Agent: kin.Agent{ID: 4, Parent: 2, PID: 5, Name: "running", Reconciling: true, CreatedAt: at, UpdatedAt: at}, Children: []*kin.TreeNode{}}
	full.Children = []*kin.TreeNode{running}
	root := &kin.TreeNode{Agent: kin.Agent{ID: 1, Name: "root", Status: kin.StatusActive, CreatedAt: at, UpdatedAt: at}, Children: []*kin.TreeNode{&full, &other}}
	doc := rowsDoc(t, root, &full, &other, running)
	got, err := httpapi.DecodeTree(httpapi.TreeRowsType, strings.NewReader(doc))
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, doc)
	}
	trees := []*kin.TreeNode{root}
	if want, have := mustJSON(t, trees), mustJSON(t, got); want != have {
		t.Fatalf("the form v2 changed the tree:\nwant %s\ngot  %s", want, have)
	}
	if !got[0].Children[0].Children[0].Reconciling {
		t.Errorf("a running agent the daemon listed as reconciling is not Reconciling")
	}
	if got[0].Children[0].Exit == nil || got[0].Children[0].Exit.Code != full.Exit.Code {
		t.Errorf("exit: got %+v, want %+v", got[0].Children[0].Exit, full.Exit)
	}
}

// TestTreeRowsMalformed: a form v2 that is not well formed is an error
// naming what is wrong, never a panic or a wrong tree; the daemon's error
// record comes back as its *kin.Error.
func TestTreeRowsMalformed(t *testing.T) {
	head := `{"version":2,"fields":["id","parent","name"],"n":2,"spend":{"at":[],"values":[]},"reconciling":[]}` + "\n"
	row := func(s string) string { return strconv.Itoa(len(s)) + ":" + s }
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", ``, "reading the head"},
		{"no newline", `{"version":2}`, "reading the head"},
		{"version", `{"version":1,"n":0}` + "\n\n", "version 1"},
		{"head not json", "{\n", "head"},
		{"negative n", `{"version":2,"n":-1}` + "\n\n", "n -1"},
		{"spend lengths", `{"version":2,"n":1,"spend":{"at":[1],"values":[]}}` + "\n\n", "0 spends for 1 agents"},
		{"truncated", head + row("1,0,1:a"), "ended after 1 agents"},
		{"no rows no end", head, "ended after 0 agents"},
		{"after end", head + "\nx", "data after the end mark"},
		{"junk record", head + "x", `got 'x'`},
		{"length without colon", head + "12", "unterminated length"},
		{"length too long", head + "1234567890:", "bad length"},
		{"row too short", head + "20:1,0,1:a", "row 0: unexpected EOF"},
		{"too many rows", head + row("1,0,1:a") + row("2,1,1:b") + row("3,1,1:c") + "\n", "more rows than the head's n (2)"},
		{"ids out of order", head + row("2,0,1:a") + row("1,0,1:b") + "\n", "agent 1 after agent 2"},
		{"duplicate id", head + row("1,0,1:a") + row("1,0,1:b") + "\n", "agent 1 after agent 1"},
		{"text for int", head + row("1:1,0,1:a") + "\n", "a text where an integer belongs"},
		{"int for text", head + row("1,0,5,") + "\n", "an integer where a text belongs"},
		{"bad text length", head + row("1,0,9:a") + "\n", "bad text length"},
		{"left over", head + row("1,0,1:ax") + "\n", "1 bytes after"},
		{"missing field", head + row("1,0,") + "\n", "field 2 (name)"},
		{"int overflow", head + row("99999999999999999999,0,1:a") + "\n", "out of range"},
		{"int overflow at 19 digits", head + row("9223372036854775808,0,1:a") + "\n", "out of range"},
		{"negative overflow", head + row("1,-9223372036854775809,1:a") + "\n", "out of range"},
		{"negative text length", head + row("1,0,-1:a") + "\n", "bad text length"},
		{"bad command", `{"version":2,"fields":["id","command"],"n":1}` + "\n" + row("1,3:[1]") + "\n", "command"},
		{"exit code range", `{"version":2,"fields":["id","exit_state","exit_code"],"n":1}` + "\n" + row("1,1,99999999999,") + "\n", "exit code"},
		{"bad error record", head + "!{nope\n", "malformed error record"},
		{"unterminated error", head + `!{"code":"internal"}`, "error record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpapi.DecodeTree(httpapi.TreeRowsType, strings.NewReader(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error with %q", got, err, tc.want)
			}
		})
	}
	// The daemon's error after the head.
	_, err := httpapi.DecodeTree(httpapi.TreeRowsType, strings.NewReader(head+row("1,0,1:a")+`!{"code":"unavailable","message":"the store went away"}`+"\n"))
	if kin.ErrorCodeOf(err) != kin.ECodeUnavailable || !strings.Contains(err.Error(), "the store went away") {
		t.Fatalf("error record: got %v", err)
	}
	// Fields this reader does not know are skipped, of either kind; a
	// cycle of parents has no root and is no panic.
	doc := `{"version":2,"fields":["later","id","parent","other","name"],"n":3}` + "\n" +
		row("5,1,0,3:abc1:a") + row("-7,2,3,0:1:b") + row("0,3,2,0:1:c") + "\n"
	got, err := httpapi.DecodeTree(httpapi.TreeRowsType, strings.NewReader(doc))
	if err != nil || len(got) != 1 || got[0].Name != "a" || len(got[0].Children) != 0 {
		t.Fatalf("unknown fields: got %s, %v", mustJSON(t, got), err)
	}
}

// FuzzDecodeTreeRows: no input makes the form v2's reader panic, and what
// it accepts keeps each agent once, under its parent.
func FuzzDecodeTreeRows(f *testing.F) {
	head := `{"version":2,"fields":["id","parent","name","command","exit_state","exit_code","exit_signal"],"n":3,"spend":{"at":[2],"values":[{"tokens":1}]},"reconciling":[3]}` + "\n"
	row := func(s string) string { return strconv.Itoa(len(s)) + ":" + s }
	f.Add(head + row("1,0,1:a0:0,0,0:") + row("2,1,1:b6:[\"x\"]1,3,0:") + row("3,2,1:c0:2,0,4:TERM") + "\n")
	f.Add(head + row("1,0,1:a0:0,0,0:") + `!{"code":"internal","message":"x"}` + "\n")
	f.Add(head + "\n")
	f.Fuzz(func(t *testing.T, doc string) {
		trees, err := httpapi.DecodeTree(httpapi.TreeRowsType, strings.NewReader(doc))
		if err != nil {
			return
		}
		seen := map[kin.AgentID]bool{}
		var walk func(ns []*kin.TreeNode, parent kin.AgentID, top bool)
		walk = func(ns []*kin.TreeNode, parent kin.AgentID, top bool) {
			for _, n := range ns {
				if seen[n.ID] {
					t.Fatalf("agent %d twice", n.ID)
				}
				seen[n.ID] = true
				if !top && n.Parent != parent {
					t.Fatalf("agent %d (parent %d) under %d", n.ID, n.Parent, parent)
				}
				walk(n.Children, n.ID, false)
			}
		}
		walk(trees, 0, true)
	})
}

// TestTreeRowsAcrossReads: the reader takes the rows it has buffered
// whole and reads a row it has only part of on its own; a long answer
// read in pieces of any size, rows cut anywhere, decodes to the same tree.
func TestTreeRowsAcrossReads(t *testing.T) {
	at := time.Unix(1_700_000_000, 123).UTC()
	nodes := []*kin.TreeNode{}
	for i := 1; i <= 3000; i++ {
		n := &kin.TreeNode{Agent: kin.Agent{ID: kin.AgentID(i), Name: fmt.Sprintf("a:%d,7:x", i), Generation: 1,
			Status: kin.StatusActive, CreatedAt: at, UpdatedAt: at.Add(time.Duration(i)), PID: -i, Grace: kin.Duration(i) << 40}, Children: []*kin.TreeNode{}}
		if i > 1 {
			n.Parent = kin.AgentID(i / 2)
			nodes[i/2-1].Children = append(nodes[i/2-1].Children, n)
		}
		if i%97 == 0 { // a row longer than the reader's buffer
			n.Command = []string{strings.Repeat("x", 70_000+i)}
		}
		nodes = append(nodes, n)
	}
	doc := rowsDoc(t, nodes...)
	want := mustJSON(t, nodes[:1])
	for name, r := range map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(doc) },
		"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(doc)) },
		"half":     func() io.Reader { return iotest.HalfReader(strings.NewReader(doc)) },
		"data+err": func() io.Reader { return iotest.DataErrReader(strings.NewReader(doc)) },
	} {
		got, err := httpapi.DecodeTree(httpapi.TreeRowsType, r())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if have := mustJSON(t, got); have != want {
			t.Fatalf("%s: the tree changed", name)
		}
	}
}
