package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kin-agents/kin/internal/jsonlist"
	"github.com/kin-agents/kin/kin"
)

// The compact tree form version 2 (GET /v1/agents/{id}/tree and GET
// /v1/tree with "Accept: application/vnd.kin.tree.v2"): an agent's
// subtree, or the whole forest, as the store's rows, streamed as the
// daemon reads them. The daemon neither takes the rows apart nor nests
// them, and the client decodes each as it arrives, while the daemon reads
// the next ones (issue 22: the 10,000-agent subtree through the API;
// version 1 built the tree, turned it into columns and only then wrote a
// byte).
//
// The body is:
//
//   - a head: one line of JSON,
//     {"version": 2, "fields": ["id", "name", ...], "n": 3,
//     "spend": {"at": [1], "values": [{"tokens": 10, ...}]}, "reconciling": [2]}
//     "fields" names each row's fields in order (kin.Agent's JSON names;
//     exit_state, exit_code and exit_signal make up "exit": 0 for none, 1
//     known, 2 unknown); at most "n" rows follow; "spend" gives the agents
//     (by id) whose TreeNode.Spend is set, "reconciling" the agents the
//     daemon is re-adopting (an agent in it that is running is
//     Reconciling);
//   - the rows in ascending id order, each "<byte length>:<row>", the row
//     being its fields in the head's order, each an integer "<decimal>,"
//     or a text "<byte length>:<bytes>" (times are Unix nanoseconds, 0 for
//     none, except created_at and updated_at, always set; booleans 0 or
//     1; "command" its JSON array);
//   - "\n" once every row was sent, or, if the daemon failed after it
//     began, "!" and the error as JSON ({"code", "message"}) and "\n".
//
// Each agent's parent is a field of its row: the reader nests the agents
// by it (an agent whose parent is not in the answer is its root), children
// in id order. A reader ignores fields it does not know.
const (
	TreeRowsType    = "application/vnd.kin.tree.v2"
	TreeRowsVersion = 2
)

// TreeRowser is a service that streams an agent's subtree (id 0: the
// forest) as stored rows (the daemon, through its registry's TreeRows),
// each run of rows valid until rows returns.
type TreeRowser interface {
	TreeRows(ctx context.Context, id kin.AgentID, head func(kin.TreeRowsHead) error, rows func([]byte) error) error
}

// treeRowsHead is the head line's JSON.
type treeRowsHead struct {
	Version     int               `json:"version"`
	Fields      []string          `json:"fields"`
	N           int               `json:"n"`
	Spend       Sparse[kin.Spend] `json:"spend"`
	Reconciling []kin.AgentID     `json:"reconciling"`
}

// writeTreeRows answers GET /v1/agents/{id}/tree (GET /v1/tree: id 0) in
// the form v2 from svc.
// An error before the head is the usual error answer; one after it ends
// the body with an error record.
func (s *Server) writeTreeRows(w http.ResponseWriter, r *http.Request, svc TreeRowser, id kin.AgentID) error {
	began := false
	err := svc.TreeRows(r.Context(), id, func(h kin.TreeRowsHead) error {
		head := treeRowsHead{Version: TreeRowsVersion, Fields: h.Fields, N: h.N,
			Spend: Sparse[kin.Spend]{At: []int{}, Values: []kin.Spend{}}, Reconciling: h.Reconciling}
		if head.Reconciling == nil {
			head.Reconciling = []kin.AgentID{}
		}
		for _, id := range slices.Sorted(maps.Keys(h.Spend)) { // by id, as the rows
			head.Spend.add(int(id), *h.Spend[id])
		}
		line, err := json.Marshal(head)
		if err != nil {
			return err
		}
		w.Header().Add("Vary", "Accept")
		w.Header().Set("Content-Type", TreeRowsType)
		w.WriteHeader(http.StatusOK)
		began = true
		_, err = w.Write(append(line, '\n'))
		return err
	}, func(rows []byte) error {
		_, err := w.Write(rows)
		return err
	})
	if !began {
		return err
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return nil // the client went away
		}
		s.log.Error("tree stream failed", "path", r.URL.Path, "err", err)
		body, _ := json.Marshal(errorBody(err))
		w.Write(append(append([]byte{'!'}, body...), '\n')) //nolint:errcheck // the answer is already broken
		return nil
	}
	w.Write([]byte{'\n'}) //nolint:errcheck // a client gone away reads no end mark: its error
	return nil
}

// rowField is what a reader does with a field of a row.
type rowField int

const (
	rowSkip rowField = iota // a field this reader does not know
	rowID
	rowName
	rowRole
	rowParent
	rowGeneration
	rowResponsible
	rowWallet
	rowConstitutionHash
	rowCapabilityHash
	rowScope
	rowSelfModifying
	rowLife
	rowStatus
	rowState
	rowCreatedAt
	rowCreatedBy
	rowUpdatedAt
	rowSpawnBlockedUntil
	rowPID
	rowCommand
	rowRestart
	rowGrace
	rowStartedAt
	rowEndedAt
	rowExitState
	rowExitCode
	rowExitSignal
	rowEndReason
	rowReplaces
	rowCursor
	rowLastHeartbeat
	rowSession
	rowResult
	rowStage
	rowHost
	rowRequestedBy
	rowFields // how many there are
)

// rowFieldNames names each rowField as the head does; rowFieldInt says
// which are integers (the others are text).
var rowFieldNames = [rowFields]string{
	rowID: "id", rowName: "name", rowRole: "role", rowParent: "parent", rowGeneration: "generation",
	rowResponsible: "responsible", rowWallet: "wallet", rowConstitutionHash: "constitution_hash",
	rowCapabilityHash: "capability_hash", rowScope: "scope", rowSelfModifying: "self_modifying",
	rowLife: "life", rowStatus: "status", rowState: "state", rowCreatedAt: "created_at",
	rowCreatedBy: "created_by", rowUpdatedAt: "updated_at", rowSpawnBlockedUntil: "spawn_blocked_until",
	rowPID: "pid", rowCommand: "command", rowRestart: "restart", rowGrace: "grace",
	rowStartedAt: "started_at", rowEndedAt: "ended_at", rowExitState: "exit_state",
	rowExitCode: "exit_code", rowExitSignal: "exit_signal", rowEndReason: "end_reason",
	rowReplaces: "replaces", rowCursor: "cursor", rowLastHeartbeat: "last_heartbeat",
	rowSession: "session", rowResult: "result", rowStage: "stage", rowHost: "host",
	rowRequestedBy: "requested_by",
}

var rowFieldInt = [rowFields]bool{
	rowID: true, rowParent: true, rowGeneration: true, rowSelfModifying: true, rowCreatedAt: true,
	rowUpdatedAt: true, rowSpawnBlockedUntil: true, rowPID: true, rowGrace: true, rowStartedAt: true,
	rowEndedAt: true, rowExitState: true, rowExitCode: true, rowReplaces: true, rowLastHeartbeat: true,
	rowRequestedBy: true,
}

var rowFieldByName = func() map[string]rowField {
	m := make(map[string]rowField, rowFields)
	for f := rowSkip + 1; f < rowFields; f++ {
		m[rowFieldNames[f]] = f
	}
	return m
}()

// maxTreeRow bounds one row of the form v2 (a row holds an agent's fields,
// its command the largest).
const maxTreeRow = 16 << 20

// DecodeTreeRows reads the form v2 from body as it arrives and nests its
// agents. Anything malformed is an error naming what is wrong, never a
// panic; an error record from the daemon is returned as the *kin.Error it
// names.
func DecodeTreeRows(body io.Reader) ([]*kin.TreeNode, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	bad := func(format string, args ...any) ([]*kin.TreeNode, error) {
		return nil, fmt.Errorf("compact tree v2: "+format, args...)
	}
	line, err := readLine(br, maxTreeHead)
	if err != nil {
		return bad("reading the head: %v", err)
	}
	var head treeRowsHead
	if err := json.Unmarshal(line, &head); err != nil {
		return bad("head: %v", err)
	}
	if head.Version != TreeRowsVersion {
		return bad("version %d, this reader knows %d", head.Version, TreeRowsVersion)
	}
	if head.N < 0 || len(head.Spend.At) != len(head.Spend.Values) {
		return bad("head: n %d, %d spends for %d agents", head.N, len(head.Spend.Values), len(head.Spend.At))
	}
	fields := make([]rowField, len(head.Fields))
	for i, name := range head.Fields {
		fields[i] = rowFieldByName[name]
	}
	nodes := make([]kin.TreeNode, 0, min(head.N, 1<<16))
	var buf []byte
	var last kin.AgentID
	// add takes the next row apart into a new node.
	add := func(row string) error {
		nodes = append(nodes, kin.TreeNode{})
		a := &nodes[len(nodes)-1].Agent
		if err := parseRow(row, fields, a); err != nil {
			return fmt.Errorf("row %d: %v", len(nodes)-1, err)
		}
		if a.ID <= last {
			return fmt.Errorf("row %d: agent %d after agent %d (want ascending ids)", len(nodes)-1, a.ID, last)
		}
		last = a.ID
		return nil
	}
	for {
		c, err := br.ReadByte()
		if err != nil {
			return bad("the answer ended after %d agents, before its end mark", len(nodes))
		}
		switch {
		case c == '\n':
			if _, err := br.ReadByte(); err != io.EOF {
				return bad("data after the end mark")
			}
			return nestRows(nodes, head)
		case c == '!':
			line, err := readLine(br, maxTreeRow)
			if err != nil {
				return bad("error record: %v", err)
			}
			var eb ErrorBody
			if err := json.Unmarshal(line, &eb); err != nil || eb.Code == "" {
				return bad("malformed error record")
			}
			return nil, kin.Errorf(eb.Code, "%s", eb.Message)
		case c < '0' || c > '9':
			return bad("want a row, the end mark or an error record after %d agents, got %q", len(nodes), c)
		}
		if err := br.UnreadByte(); err != nil {
			return bad("%v", err)
		}
		// The whole records already buffered, taken as one string (one
		// allocation and copy for them all, not one a row: the rows'
		// texts are slices of it); a record the buffer holds only part
		// of, or anything else, is read below.
		if span, k := wholeRecords(br, head.N-len(nodes)); k > 0 {
			recs := string(span)
			if _, err := br.Discard(len(span)); err != nil {
				return bad("%v", err)
			}
			for range k {
				i := strings.IndexByte(recs, ':')
				n, _ := strconv.Atoi(recs[:i]) // wholeRecords checked it
				if err := add(recs[i+1 : i+1+n]); err != nil {
					return bad("%v", err)
				}
				recs = recs[i+1+n:]
			}
			continue
		}
		n, err := readLength(br, ':')
		if err != nil {
			return bad("row %d: %v", len(nodes), err)
		}
		if n > maxTreeRow {
			return bad("row %d is %d bytes (at most %d)", len(nodes), n, maxTreeRow)
		}
		if len(nodes) >= head.N {
			return bad("more rows than the head's n (%d)", head.N)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return bad("row %d: %v", len(nodes), err)
		}
		if err := add(string(buf[:n])); err != nil {
			return bad("%v", err)
		}
	}
}

// wholeRecords is the longest run of whole records "<length>:<row>" at
// the start of what br has buffered, at most max of them, and how many it
// holds. Where the run stops (a record not all buffered, a length of more
// than 9 digits, anything but a record), the caller reads on one byte or
// one record at a time, as it would without it.
func wholeRecords(br *bufio.Reader, max int) (span []byte, k int) {
	data, _ := br.Peek(br.Buffered()) // never more than is buffered: no error
	end := 0
	for k < max {
		i, n := end, 0
		for i < len(data) && i-end < 9 && data[i] >= '0' && data[i] <= '9' {
			n = n*10 + int(data[i]-'0')
			i++
		}
		if i == end || i >= len(data) || data[i] != ':' || n > len(data)-i-1 {
			break
		}
		end = i + 1 + n
		k++
	}
	return data[:end], k
}

// maxTreeHead bounds the head line of the form v2 (its spends grow with
// the agents that have one).
const maxTreeHead = 256 << 20

// readLine reads up to and including the next '\n', at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		if len(line)+len(part) > limit {
			return nil, fmt.Errorf("line longer than %d bytes", limit)
		}
		switch {
		case err == nil && line == nil:
			return part, nil
		case err == nil:
			return append(line, part...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, part...)
		default:
			return nil, fmt.Errorf("unterminated line: %v", err)
		}
	}
}

// readLength reads a decimal length ended by end.
func readLength(br *bufio.Reader, end byte) (int, error) {
	n, digits := 0, 0
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, fmt.Errorf("unterminated length")
		}
		if c == end && digits > 0 {
			return n, nil
		}
		if c < '0' || c > '9' || digits >= 9 {
			return 0, fmt.Errorf("bad length (want up to 9 digits and %q)", end)
		}
		n = n*10 + int(c-'0')
		digits++
	}
}

// parseRow sets a's fields from row.
func parseRow(row string, fields []rowField, a *kin.Agent) error {
	var exitState, exitCode int64
	var exitSignal string
	for k, f := range fields {
		// Each field is digits (an optional '-' for an integer) ended by
		// ',' (an integer) or ':' (a text of that many bytes). Their
		// value is taken as they are read (strconv was a fifth of the
		// reader's CPU); a number of more than 19 digits, or of none,
		// goes to strconv, which says what is wrong with it.
		i, neg := 0, false
		if i < len(row) && row[i] == '-' {
			i, neg = 1, true
		}
		var u uint64
		for i < len(row) && row[i] >= '0' && row[i] <= '9' {
			u = u*10 + uint64(row[i]-'0') // 19 digits fit; more wrap, and go to strconv
			i++
		}
		if i == 0 || i >= len(row) || (row[i] != ',' && row[i] != ':') {
			return fmt.Errorf("field %d (%s): want an integer or a text", k, fieldName(f))
		}
		digits := i
		if neg {
			digits--
		}
		if row[i] == ',' {
			if f != rowSkip && !rowFieldInt[f] {
				return fmt.Errorf("field %d (%s): an integer where a text belongs", k, fieldName(f))
			}
			var v int64
			switch short := digits >= 1 && digits <= 19; {
			case short && !neg && u <= math.MaxInt64:
				v = int64(u)
			case short && neg && u <= -math.MinInt64:
				v = int64(-u) // two's complement: MinInt64 too
			default:
				var err error
				if v, err = strconv.ParseInt(row[:i], 10, 64); err != nil {
					return fmt.Errorf("field %d (%s): %v", k, fieldName(f), err)
				}
			}
			row = row[i+1:]
			switch f {
			case rowID:
				a.ID = kin.AgentID(v)
			case rowParent:
				a.Parent = kin.AgentID(v)
			case rowGeneration:
				a.Generation = int(v)
			case rowSelfModifying:
				a.SelfModifying = v != 0
			case rowCreatedAt:
				a.CreatedAt = time.Unix(0, v).UTC()
			case rowUpdatedAt:
				a.UpdatedAt = time.Unix(0, v).UTC()
			case rowSpawnBlockedUntil:
				a.SpawnBlockedUntil = intTime(v)
			case rowPID:
				a.PID = int(v)
			case rowGrace:
				a.Grace = kin.Duration(v)
			case rowStartedAt:
				a.StartedAt = intTime(v)
			case rowEndedAt:
				a.EndedAt = intTime(v)
			case rowExitState:
				exitState = v
			case rowExitCode:
				exitCode = v
			case rowReplaces:
				a.Replaces = kin.AgentID(v)
			case rowLastHeartbeat:
				a.LastHeartbeat = intTime(v)
			case rowRequestedBy:
				a.RequestedBy = kin.AgentID(v)
			}
			continue
		}
		if f != rowSkip && rowFieldInt[f] {
			return fmt.Errorf("field %d (%s): a text where an integer belongs", k, fieldName(f))
		}
		if digits > 19 { // leading zeros, or too long
			if n, err := strconv.Atoi(row[:i]); err == nil && n >= 0 {
				u = uint64(n)
			} else {
				u = math.MaxUint64
			}
		}
		if neg || digits < 1 || u > uint64(len(row)-i-1) {
			return fmt.Errorf("field %d (%s): bad text length %q", k, fieldName(f), row[:i])
		}
		n := int(u)
		v := row[i+1 : i+1+n]
		row = row[i+1+n:]
		switch f {
		case rowName:
			a.Name = v
		case rowRole:
			a.Role = v
		case rowResponsible:
			a.Responsible = v
		case rowWallet:
			a.Wallet = v
		case rowConstitutionHash:
			a.ConstitutionHash = v
		case rowCapabilityHash:
			a.CapabilityHash = v
		case rowScope:
			a.Scope = v
		case rowLife:
			a.Life = kin.Life(v)
		case rowStatus:
			a.Status = kin.Status(v)
		case rowState:
			a.State = kin.State(v)
		case rowCreatedBy:
			a.CreatedBy = v
		case rowCommand:
			if v != "" {
				cmd, err := jsonlist.Parse(v)
				if err != nil {
					return fmt.Errorf("field %d (command): %v", k, err)
				}
				a.Command = cmd
			}
		case rowRestart:
			a.Restart = kin.RestartPolicy(v)
		case rowExitSignal:
			exitSignal = v
		case rowEndReason:
			a.EndReason = v
		case rowCursor:
			a.Cursor = v
		case rowSession:
			a.Session = v
		case rowResult:
			a.Result = kin.ResultStatus(v)
		case rowStage:
			a.Stage = v
		case rowHost:
			a.Host = v
		}
	}
	if row != "" {
		return fmt.Errorf("%d bytes after the head's %d fields", len(row), len(fields))
	}
	if exitState != 0 {
		if exitCode < math.MinInt32 || exitCode > math.MaxInt32 {
			return fmt.Errorf("exit code %d out of range", exitCode)
		}
		a.Exit = &kin.Exit{Code: int(exitCode), Signal: exitSignal, Known: exitState == 1}
	}
	return nil
}

func fieldName(f rowField) string {
	if f == rowSkip {
		return "unknown"
	}
	return rowFieldNames[f]
}

// nestRows nests nodes (ascending ids) by their parents: an agent whose
// parent is not among them is a root; children in id order.
func nestRows(nodes []kin.TreeNode, head treeRowsHead) ([]*kin.TreeNode, error) {
	at := make(map[kin.AgentID]int32, len(nodes))
	for i := range nodes {
		at[nodes[i].ID] = int32(i)
	}
	for j, id := range head.Spend.At {
		if i, ok := at[kin.AgentID(id)]; ok {
			sp := head.Spend.Values[j]
			nodes[i].Spend = &sp
		}
	}
	for _, id := range head.Reconciling {
		if i, ok := at[id]; ok {
			nodes[i].Reconciling = nodes[i].Running()
		}
	}
	parent := make([]int32, len(nodes))
	count := make([]int32, len(nodes))
	roots := 0
	for i := range nodes {
		if p, ok := at[nodes[i].Parent]; ok && p != int32(i) {
			parent[i] = p
			count[p]++
		} else {
			parent[i] = -1
			roots++
		}
	}
	kids := make([]*kin.TreeNode, len(nodes)-roots)
	for i, c := range count {
		nodes[i].Children, kids = kids[:0:c], kids[c:]
	}
	out := make([]*kin.TreeNode, 0, roots)
	for i, p := range parent {
		if p >= 0 {
			nodes[p].Children = append(nodes[p].Children, &nodes[i])
		} else {
			out = append(out, &nodes[i])
		}
	}
	return out, nil
}
