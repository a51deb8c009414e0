package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/kin-agents/kin/kin"
)

// The compact wire form of a tree (GET /v1/tree and /v1/agents/{id}/tree),
// which a client asks for with "Accept: application/vnd.kin.tree.v1+json".
// Without that Accept the answer stays the nested JSON of []kin.TreeNode,
// for clients that predate the compact form. The client SDK asks for it
// and decodes either, so it works with daemons of either age.
//
// Version 1 is one JSON object of columns, one entry per agent in each:
//
//	{"version": 1, "n": 3,
//	 "up": [-1, 0, 0],
//	 "strings": ["", "root", "a", "b", "active", ...],
//	 "int": {"id": [1, 2, 3], "parent": [0, 1, 1], "created_at": [1764150000000000000, ...], ...},
//	 "str": {"name": [1, 2, 3], "status": [4, 4, 4], ...},
//	 "command": {"at": [2], "values": [["sleep", "60"]]},
//	 "exit": {"at": [], "values": []},
//	 "spend": {"at": [0], "values": [{"tokens": 10, ...}]}}
//
//   - The agents are listed in pre-order (a node, then its children's
//     subtrees in order). up[i] is the index of agent i's parent node in
//     the list, -1 for a root of the answer (the asked-for agent, or each
//     root of the forest): always less than i.
//   - "int" holds the integer fields of kin.Agent by their JSON names:
//     ids, counts, booleans as 0 and 1, durations in nanoseconds, and times
//     as Unix nanoseconds (0 for no time; every time is an instant in UTC).
//   - "str" holds the string fields by their JSON names as indexes into
//     "strings", so a value repeated over thousands of agents (a status, a
//     responsible person, a hash) is sent once.
//   - A column whose every value is zero (0, or the string "") is left out.
//   - "command", "exit" and "spend" are sparse: the indexes of the agents
//     that have one ("at") and their values, in kin.Agent's and
//     kin.TreeNode's JSON shapes.
//
// A reader ignores columns it does not know. A change that an older reader
// would misread gets a new version and a new media type.
const (
	TreeColumnsType    = "application/vnd.kin.tree.v1+json"
	TreeColumnsVersion = 1
)

// TreeColumns is the compact form of a tree, version 1.
type TreeColumns struct {
	Version int                `json:"version"`
	N       int                `json:"n"`
	Up      []int              `json:"up"`
	Strings []string           `json:"strings"`
	Int     map[string][]int64 `json:"int"`
	Str     map[string][]int   `json:"str"`
	Command Sparse[[]string]   `json:"command"`
	Exit    Sparse[kin.Exit]   `json:"exit"`
	Spend   Sparse[kin.Spend]  `json:"spend"`
}

// Sparse is a column that few agents have a value in: the agents' indexes
// and their values.
type Sparse[T any] struct {
	At     []int `json:"at"`
	Values []T   `json:"values"`
}

func (s *Sparse[T]) add(i int, v T) {
	s.At = append(s.At, i)
	s.Values = append(s.Values, v)
}

// intField and strField are kin.Agent's scalar fields by their JSON names.
// TestTreeColumnsCarryEveryField fails when kin.Agent gains a field that
// none of these, nor the sparse columns, carries.
type intField struct {
	name string
	get  func(*kin.Agent) int64
	set  func(*kin.Agent, int64)
}

type strField struct {
	name string
	get  func(*kin.Agent) string
	set  func(*kin.Agent, string)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// timeInt is a time as Unix nanoseconds, 0 for the zero time.
func timeInt(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func intTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

var intFields = []intField{
	{"id", func(a *kin.Agent) int64 { return int64(a.ID) }, func(a *kin.Agent, v int64) { a.ID = kin.AgentID(v) }},
	{"parent", func(a *kin.Agent) int64 { return int64(a.Parent) }, func(a *kin.Agent, v int64) { a.Parent = kin.AgentID(v) }},
	{"generation", func(a *kin.Agent) int64 { return int64(a.Generation) }, func(a *kin.Agent, v int64) { a.Generation = int(v) }},
	{"self_modifying", func(a *kin.Agent) int64 { return boolInt(a.SelfModifying) }, func(a *kin.Agent, v int64) { a.SelfModifying = v != 0 }},
	{"created_at", func(a *kin.Agent) int64 { return timeInt(a.CreatedAt) }, func(a *kin.Agent, v int64) { a.CreatedAt = intTime(v) }},
	{"updated_at", func(a *kin.Agent) int64 { return timeInt(a.UpdatedAt) }, func(a *kin.Agent, v int64) { a.UpdatedAt = intTime(v) }},
	{"spawn_blocked_until", func(a *kin.Agent) int64 { return timeInt(a.SpawnBlockedUntil) }, func(a *kin.Agent, v int64) { a.SpawnBlockedUntil = intTime(v) }},
	{"pid", func(a *kin.Agent) int64 { return int64(a.PID) }, func(a *kin.Agent, v int64) { a.PID = int(v) }},
	{"grace", func(a *kin.Agent) int64 { return int64(a.Grace) }, func(a *kin.Agent, v int64) { a.Grace = kin.Duration(v) }},
	{"started_at", func(a *kin.Agent) int64 { return timeInt(a.StartedAt) }, func(a *kin.Agent, v int64) { a.StartedAt = intTime(v) }},
	{"ended_at", func(a *kin.Agent) int64 { return timeInt(a.EndedAt) }, func(a *kin.Agent, v int64) { a.EndedAt = intTime(v) }},
	{"replaces", func(a *kin.Agent) int64 { return int64(a.Replaces) }, func(a *kin.Agent, v int64) { a.Replaces = kin.AgentID(v) }},
	{"last_heartbeat", func(a *kin.Agent) int64 { return timeInt(a.LastHeartbeat) }, func(a *kin.Agent, v int64) { a.LastHeartbeat = intTime(v) }},
	{"reconciling", func(a *kin.Agent) int64 { return boolInt(a.Reconciling) }, func(a *kin.Agent, v int64) { a.Reconciling = v != 0 }},
}

var strFields = []strField{
	{"name", func(a *kin.Agent) string { return a.Name }, func(a *kin.Agent, v string) { a.Name = v }},
	{"role", func(a *kin.Agent) string { return a.Role }, func(a *kin.Agent, v string) { a.Role = v }},
	{"responsible", func(a *kin.Agent) string { return a.Responsible }, func(a *kin.Agent, v string) { a.Responsible = v }},
	{"wallet", func(a *kin.Agent) string { return a.Wallet }, func(a *kin.Agent, v string) { a.Wallet = v }},
	{"constitution_hash", func(a *kin.Agent) string { return a.ConstitutionHash }, func(a *kin.Agent, v string) { a.ConstitutionHash = v }},
	{"capability_hash", func(a *kin.Agent) string { return a.CapabilityHash }, func(a *kin.Agent, v string) { a.CapabilityHash = v }},
	{"scope", func(a *kin.Agent) string { return a.Scope }, func(a *kin.Agent, v string) { a.Scope = v }},
	{"life", func(a *kin.Agent) string { return string(a.Life) }, func(a *kin.Agent, v string) { a.Life = kin.Life(v) }},
	{"status", func(a *kin.Agent) string { return string(a.Status) }, func(a *kin.Agent, v string) { a.Status = kin.Status(v) }},
	{"state", func(a *kin.Agent) string { return string(a.State) }, func(a *kin.Agent, v string) { a.State = kin.State(v) }},
	{"created_by", func(a *kin.Agent) string { return a.CreatedBy }, func(a *kin.Agent, v string) { a.CreatedBy = v }},
	{"restart", func(a *kin.Agent) string { return string(a.Restart) }, func(a *kin.Agent, v string) { a.Restart = kin.RestartPolicy(v) }},
	{"end_reason", func(a *kin.Agent) string { return a.EndReason }, func(a *kin.Agent, v string) { a.EndReason = v }},
	{"cursor", func(a *kin.Agent) string { return a.Cursor }, func(a *kin.Agent, v string) { a.Cursor = v }},
	{"session", func(a *kin.Agent) string { return a.Session }, func(a *kin.Agent, v string) { a.Session = v }},
	{"result", func(a *kin.Agent) string { return string(a.Result) }, func(a *kin.Agent, v string) { a.Result = kin.ResultStatus(v) }},
	{"stage", func(a *kin.Agent) string { return a.Stage }, func(a *kin.Agent, v string) { a.Stage = v }},
}

// EncodeTreeColumns turns trees into their compact form.
func EncodeTreeColumns(trees []*kin.TreeNode) *TreeColumns {
	var order []*kin.TreeNode
	var up []int
	var walk func(n *kin.TreeNode, parent int)
	walk = func(n *kin.TreeNode, parent int) {
		i := len(order)
		order = append(order, n)
		up = append(up, parent)
		for _, c := range n.Children {
			walk(c, i)
		}
	}
	for _, t := range trees {
		walk(t, -1)
	}
	n := len(order)
	tc := &TreeColumns{Version: TreeColumnsVersion, N: n, Up: up, Strings: []string{""},
		Int: map[string][]int64{}, Str: map[string][]int{},
		Command: Sparse[[]string]{At: []int{}, Values: [][]string{}},
		Exit:    Sparse[kin.Exit]{At: []int{}, Values: []kin.Exit{}},
		Spend:   Sparse[kin.Spend]{At: []int{}, Values: []kin.Spend{}}}
	if tc.Up == nil {
		tc.Up = []int{}
	}
	for _, f := range intFields {
		var col []int64
		for i, node := range order {
			v := f.get(&node.Agent)
			if v != 0 && col == nil {
				col = make([]int64, n)
			}
			if col != nil {
				col[i] = v
			}
		}
		if col != nil {
			tc.Int[f.name] = col
		}
	}
	index := map[string]int{"": 0}
	for _, f := range strFields {
		var col []int
		for i, node := range order {
			v := f.get(&node.Agent)
			if v == "" {
				continue
			}
			if col == nil {
				col = make([]int, n)
			}
			k, ok := index[v]
			if !ok {
				k = len(tc.Strings)
				index[v] = k
				tc.Strings = append(tc.Strings, v)
			}
			col[i] = k
		}
		if col != nil {
			tc.Str[f.name] = col
		}
	}
	for i, node := range order {
		if len(node.Command) > 0 {
			tc.Command.add(i, node.Command)
		}
		if node.Exit != nil {
			tc.Exit.add(i, *node.Exit)
		}
		if node.Spend != nil {
			tc.Spend.add(i, *node.Spend)
		}
	}
	return tc
}

// Trees turns the compact form back into nested trees, checking that it
// is well formed (a malformed one is an error, never a panic).
func (tc *TreeColumns) Trees() ([]*kin.TreeNode, error) {
	bad := func(format string, args ...any) ([]*kin.TreeNode, error) {
		return nil, fmt.Errorf("compact tree: "+format, args...)
	}
	if tc.Version != TreeColumnsVersion {
		return bad("version %d, this reader knows %d", tc.Version, TreeColumnsVersion)
	}
	n := tc.N
	if n < 0 || len(tc.Up) != n {
		return bad("%d parent links for %d agents", len(tc.Up), n)
	}
	for name, col := range tc.Int {
		if len(col) != n {
			return bad("column %q has %d values for %d agents", name, len(col), n)
		}
	}
	for name, col := range tc.Str {
		if len(col) != n {
			return bad("column %q has %d values for %d agents", name, len(col), n)
		}
		for _, k := range col {
			if k < 0 || k >= len(tc.Strings) {
				return bad("column %q names string %d of %d", name, k, len(tc.Strings))
			}
		}
	}
	nodes := make([]kin.TreeNode, n)
	children := make([]int, n) // how many children each node has
	var roots []*kin.TreeNode
	for i, p := range tc.Up {
		if p < -1 || p >= i {
			return bad("agent %d's parent is node %d (want -1, or a node listed before it)", i, p)
		}
		if p >= 0 {
			children[p]++
		}
	}
	for _, f := range intFields {
		if col, ok := tc.Int[f.name]; ok {
			for i, v := range col {
				f.set(&nodes[i].Agent, v)
			}
		}
	}
	for _, f := range strFields {
		if col, ok := tc.Str[f.name]; ok {
			for i, k := range col {
				f.set(&nodes[i].Agent, tc.Strings[k])
			}
		}
	}
	if err := sparseInto(tc.Command, n, "command", func(i int, v []string) { nodes[i].Command = v }); err != nil {
		return nil, err
	}
	if err := sparseInto(tc.Exit, n, "exit", func(i int, v kin.Exit) { nodes[i].Exit = &v }); err != nil {
		return nil, err
	}
	if err := sparseInto(tc.Spend, n, "spend", func(i int, v kin.Spend) { nodes[i].Spend = &v }); err != nil {
		return nil, err
	}
	// One backing array for every node's children, each node's share
	// sized by its count above.
	links := make([]*kin.TreeNode, 0, n)
	for i := range nodes {
		nodes[i].Children = links[len(links) : len(links) : len(links)+children[i]]
		links = links[:len(links)+children[i]]
	}
	roots = []*kin.TreeNode{}
	for i, p := range tc.Up {
		if p < 0 {
			roots = append(roots, &nodes[i])
		} else {
			nodes[p].Children = append(nodes[p].Children, &nodes[i])
		}
	}
	return roots, nil
}

func sparseInto[T any](s Sparse[T], n int, name string, set func(int, T)) error {
	if len(s.At) != len(s.Values) {
		return fmt.Errorf("compact tree: column %q has %d indexes and %d values", name, len(s.At), len(s.Values))
	}
	for j, i := range s.At {
		if i < 0 || i >= n {
			return fmt.Errorf("compact tree: column %q names agent %d of %d", name, i, n)
		}
		set(i, s.Values[j])
	}
	return nil
}

// wantsTreeColumns reports whether the request's Accept header lists the
// compact tree form.
func wantsTreeColumns(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(part); err == nil && mt == TreeColumnsType {
				return true
			}
		}
	}
	return false
}

// writeTree answers trees in the form the request asked for.
func writeTree(w http.ResponseWriter, r *http.Request, trees []*kin.TreeNode) error {
	w.Header().Add("Vary", "Accept")
	if !wantsTreeColumns(r) {
		return writeJSON(w, http.StatusOK, trees)
	}
	w.Header().Set("Content-Type", TreeColumnsType)
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(EncodeTreeColumns(trees))
}

// DecodeTree reads a tree answer in the form its Content-Type names: the
// compact form, or the nested JSON an older daemon sends.
func DecodeTree(contentType string, body io.Reader) ([]*kin.TreeNode, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt != TreeColumnsType {
		var out []*kin.TreeNode
		err := json.NewDecoder(body).Decode(&out)
		return out, err
	}
	var tc TreeColumns
	if err := json.NewDecoder(body).Decode(&tc); err != nil {
		return nil, err
	}
	return tc.Trees()
}
