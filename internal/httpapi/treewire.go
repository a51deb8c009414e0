package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
//		{"version": 1, "n": 3,
//		 "up": [-1, 0, 0],
//		 "strings": ["", "root", "a", "b", "active", ...],
//		 "int": {"id": [1, 2, 3], "parent": [0, 1, 1], "created_at": [1764150000000000000, ...], ...},
//		 "str": {"name": [1, 2, 3], "status": [4, 4, 4], ...},
//		 "command": {"at": [2], "values": [["sleep", "60"]]},
//		 "exit": {"at": [], "values": []},
//		 "spend": {"at": [0], "values": [{"tokens": 10, ...}]}}
//
//	  - The agents are listed in pre-order (a node, then its children's
//	    subtrees in order). up[i] is the index of agent i's parent node in
//	    the list, -1 for a root of the answer (the asked-for agent, or each
//	    root of the forest): always less than i.
//	  - "int" holds the integer fields of kin.Agent by their JSON names:
//	    ids, counts, booleans as 0 and 1, durations in nanoseconds, and times
//	    as Unix nanoseconds (0 for no time; every time is an instant in UTC).
//	  - "str" holds the string fields by their JSON names as indexes into
//	    "strings", so a value repeated over thousands of agents (a status, a
//	    responsible person, a hash) is sent once.
//	  - A column whose every value is zero (0, or the string "") is left out.
//	  - "command", "exit" and "spend" are sparse: the indexes of the agents
//	    that have one ("at") and their values, in kin.Agent's and
//	    kin.TreeNode's JSON shapes.
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
	{"requested_by", func(a *kin.Agent) int64 { return int64(a.RequestedBy) }, func(a *kin.Agent, v int64) { a.RequestedBy = kin.AgentID(v) }},
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
	{"host", func(a *kin.Agent) string { return a.Host }, func(a *kin.Agent, v string) { a.Host = v }},
}

// EncodeTreeColumns turns trees into their compact form.
func EncodeTreeColumns(trees []*kin.TreeNode) *TreeColumns {
	order := make([]*kin.TreeNode, 0, 1024)
	up := make([]int, 0, 1024)
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
		prev, prevK := "", 0 // runs of one value (a status, a person) skip the map
		for i, node := range order {
			v := f.get(&node.Agent)
			if v == "" {
				continue
			}
			if col == nil {
				col = make([]int, n)
			}
			if v == prev {
				col[i] = prevK
				continue
			}
			k, ok := index[v]
			if !ok {
				k = len(tc.Strings)
				index[v] = k
				tc.Strings = append(tc.Strings, v)
			}
			col[i], prev, prevK = k, v, k
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
func wantsTreeColumns(r *http.Request) bool { return accepts(r, TreeColumnsType) }

// accepts reports whether the request's Accept header lists the media
// type mediaType (and not with q=0).
func accepts(r *http.Request, mediaType string) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || mt != mediaType {
				continue
			}
			if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q <= 0 {
				return false // "q=0": not acceptable (RFC 9110 §12.4.2)
			}
			return true
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
	tc := EncodeTreeColumns(trees)
	_, err := w.Write(tc.AppendJSON(make([]byte, 0, 64*1024+tc.N*128)))
	return err
}

// DecodeTree reads a tree answer in the form its Content-Type names: the
// compact form v2 or v1, or the nested JSON an older daemon sends.
func DecodeTree(contentType string, body io.Reader) ([]*kin.TreeNode, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == TreeRowsType {
		return DecodeTreeRows(body)
	}
	if mt != TreeColumnsType {
		var out []*kin.TreeNode
		err := json.NewDecoder(body).Decode(&out)
		return out, err
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	tc, err := ParseTreeColumns(data)
	if err != nil {
		return nil, err
	}
	return tc.Trees()
}

// AppendJSON appends the compact form's JSON to b. It writes what
// json.Marshal would (less HTML escaping), by hand: encoding/json's
// reflection was most of the daemon's cost of a large tree.
func (tc *TreeColumns) AppendJSON(b []byte) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(tc.Version), 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, int64(tc.N), 10)
	b = append(b, `,"up":`...)
	b = appendInts(b, tc.Up)
	b = append(b, `,"strings":[`...)
	for i, s := range tc.Strings {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	b = append(b, `],"int":`...)
	b = appendColumns(b, intFieldNames, tc.Int)
	b = append(b, `,"str":`...)
	b = appendColumns(b, strFieldNames, tc.Str)
	for _, sp := range []struct {
		name string
		v    any
	}{{"command", tc.Command}, {"exit", tc.Exit}, {"spend", tc.Spend}} {
		b = append(b, ',')
		b = appendString(b, sp.name)
		b = append(b, ':')
		js, err := json.Marshal(sp.v) // few agents have one
		if err != nil {
			js = []byte(`{"at":[],"values":[]}`) // unreachable: these types always marshal
		}
		b = append(b, js...)
	}
	return append(b, '}', '\n')
}

func appendInts[T int | int64](b []byte, col []T) []byte {
	b = append(b, '[')
	for i, v := range col {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, ']')
}

// appendColumns appends {"name":[...],...}: the columns of cols named in
// names, in that (fixed) order.
func appendColumns[T int | int64](b []byte, names []string, cols map[string][]T) []byte {
	b = append(b, '{')
	first := true
	for _, name := range names {
		col, ok := cols[name]
		if !ok {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
		b = appendInts(b, col)
	}
	return append(b, '}')
}

// intFieldNames and strFieldNames are the columns' names in their fixed
// order on the wire.
var intFieldNames, strFieldNames = func() (is, ss []string) {
	for _, f := range intFields {
		is = append(is, f.name)
	}
	for _, f := range strFields {
		ss = append(ss, f.name)
	}
	return is, ss
}()

// appendString appends s as a JSON string, as encoding/json does less its
// HTML escaping: invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029 are
// escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// ParseTreeColumns reads the compact form's JSON. It is a reader for this
// one shape (with a generic skip for members it does not know), several
// times faster than encoding/json's reflection on 10,000 agents; any JSON
// that is not well formed, or a value of the wrong type, is an error.
func ParseTreeColumns(data []byte) (*TreeColumns, error) {
	p := &parser{b: data}
	tc := &TreeColumns{Int: map[string][]int64{}, Str: map[string][]int{}}
	p.object(func(key string) {
		switch key {
		case "version":
			tc.Version = int(p.int())
		case "n":
			tc.N = int(p.int())
		case "up":
			tc.Up = p.ints()
		case "strings":
			tc.Strings = p.strings()
		case "int":
			p.object(func(name string) { tc.Int[name] = p.int64s() })
		case "str":
			p.object(func(name string) { tc.Str[name] = p.ints() })
		case "command":
			sparseParse(p, &tc.Command)
		case "exit":
			sparseParse(p, &tc.Exit)
		case "spend":
			sparseParse(p, &tc.Spend)
		default:
			p.skip(0)
		}
	})
	p.ws()
	if p.err == nil && p.i != len(p.b) {
		p.fail("data after the document")
	}
	if p.err != nil {
		return nil, fmt.Errorf("compact tree: %w", p.err)
	}
	return tc, nil
}

// parser reads JSON from b; the first error stops it (every method then
// returns zero values).
type parser struct {
	b   []byte
	i   int
	err error
}

func (p *parser) fail(what string) {
	if p.err == nil {
		p.err = fmt.Errorf("%s at byte %d", what, p.i)
	}
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (p *parser) peek() byte {
	p.ws()
	if p.err != nil || p.i >= len(p.b) {
		return 0
	}
	return p.b[p.i]
}

func (p *parser) expect(c byte) {
	if p.peek() != c {
		p.fail(fmt.Sprintf("want %q", c))
		return
	}
	p.i++
}

// null consumes a null, reporting whether there was one.
func (p *parser) null() bool {
	if p.peek() == 'n' && bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// object reads an object, calling member for each key with the parser at
// the member's value (which member must read).
func (p *parser) object(member func(key string)) {
	if p.null() {
		return
	}
	p.expect('{')
	if p.peek() == '}' {
		p.i++
		return
	}
	for p.err == nil {
		key := p.string()
		p.expect(':')
		if p.err != nil {
			return
		}
		member(key)
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return
		default:
			p.fail("want , or }")
		}
	}
}

// array reads an array, calling elem with the parser at each element.
func (p *parser) array(elem func()) {
	if p.null() {
		return
	}
	p.expect('[')
	if p.peek() == ']' {
		p.i++
		return
	}
	for p.err == nil {
		elem()
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return
		default:
			p.fail("want , or ]")
		}
	}
}

func (p *parser) int() int64 {
	p.ws()
	start, neg := p.i, false
	if p.i < len(p.b) && p.b[p.i] == '-' {
		neg = true
		p.i++
	}
	var n uint64
	digits := 0
	for ; p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9'; p.i++ {
		d := uint64(p.b[p.i] - '0')
		if n > (math.MaxUint64-d)/10 {
			p.fail("integer out of range")
			return 0
		}
		n = n*10 + d
		digits++
	}
	if p.err != nil {
		return 0
	}
	if digits == 0 || (digits > 1 && p.b[start+boolIndex(neg)] == '0') {
		p.i = start
		p.fail("want an integer")
		return 0
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.fail("want an integer, not a fraction")
		return 0
	}
	if neg {
		if n > 1<<63 {
			p.fail("integer out of range")
			return 0
		}
		return -int64(n)
	}
	if n > math.MaxInt64 {
		p.fail("integer out of range")
		return 0
	}
	return int64(n)
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (p *parser) ints() []int {
	out := []int{}
	p.array(func() {
		v := p.int()
		if int64(int(v)) != v {
			p.fail("integer out of range")
		}
		out = append(out, int(v))
	})
	return out
}

func (p *parser) int64s() []int64 {
	out := []int64{}
	p.array(func() { out = append(out, p.int()) })
	return out
}

func (p *parser) strings() []string {
	out := []string{}
	p.array(func() { out = append(out, p.string()) })
	return out
}

// string reads a JSON string. One without escapes that is valid UTF-8 is
// copied as it is; any other is handed to encoding/json, which decodes its
// escapes (or names what is wrong with it).
func (p *parser) string() string {
	if p.peek() != '"' {
		p.fail("want a string")
		return ""
	}
	start := p.i
	p.i++
	plain := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if s := p.b[start+1 : p.i-1]; plain && utf8.Valid(s) {
				return string(s)
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				p.fail("bad string: " + err.Error())
			}
			return s
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			p.fail("control character in a string")
			return ""
		default:
			p.i++
		}
	}
	p.fail("unterminated string")
	return ""
}

// skip reads past any JSON value.
func (p *parser) skip(depth int) {
	if depth > 64 {
		p.fail("nested too deep")
		return
	}
	switch c := p.peek(); {
	case c == '{':
		p.object(func(string) { p.skip(depth + 1) })
	case c == '[':
		p.array(func() { p.skip(depth + 1) })
	case c == '"':
		p.string()
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.b) && strings.IndexByte("+-.eE0123456789", p.b[p.i]) >= 0 {
			p.i++
		}
		var f float64
		if err := json.Unmarshal(p.b[start:p.i], &f); err != nil {
			p.fail("bad number")
		}
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
				p.i += len(lit)
				return
			}
		}
		p.fail("want a value")
	}
}

// sparseParse reads a sparse column with encoding/json: few agents have one.
func sparseParse[T any](p *parser, s *Sparse[T]) {
	p.ws()
	start := p.i
	p.skip(0)
	if p.err != nil {
		return
	}
	if err := json.Unmarshal(p.b[start:p.i], s); err != nil {
		p.fail("bad sparse column: " + err.Error())
	}
}
