package kin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Event types. The names are a contract: consumers filter on them.
const (
	EventAgentRegistered = "agent.registered"    // seed 000 AgentRegistered: agent, creator, responsible, parent, generation
	EventChildSpawned    = "agent.child.spawned" // seed 000 ChildSpawned: parent, child, generation
	EventAgentStatus     = "agent.status"        // agent, from, to, by, reason
	EventSpawnRejected   = "spawn.rejected"      // addressed to the parent: parent, code, message, ...
	EventCircuitOpen     = "governor.circuit_open"
	EventGovernorChanged = "governor.changed" // key, from, to, by

	// The supervisor's events (seed 001 "Parent Death", seed 002 §5).
	EventAgentStarted  = "agent.started"      // agent, pid, command
	EventAgentExited   = "agent.exited"       // agent, state, code, signal
	EventChildCancel   = "agent.child.cancel" // seed 001: parent, child, reason
	EventAgentStop     = "agent.stop"         // seed 001: agent, status
	EventAgentState    = "agent.state"        // agent, from, to: liveness transitions
	EventAgentOffline  = "agent.offline"      // addressed to the parent: agent, parent, last_heartbeat, host, from
	EventAgentReplaced = "agent.replaced"     // agent (the old one), replacement, cursor
	EventAgentFailed   = "agent.failed"       // addressed to the parent: restart intensity exceeded
	EventAgentAdopted  = "agent.adopted"      // a restarted daemon took the running agent back
	EventAgentLost     = "agent.lost"         // its process ended while the daemon was down
	EventAgentResult   = "agent.result"       // seed 001: a child's result checked and handed back: agent, parent, status, violations
	// EventFleetCancel asks another host of the fleet to cancel its agents
	// of an owned subtree being cancelled (issue 24): host, root, agents,
	// reason, grace. Agent is the subtree's root.
	EventFleetCancel = "fleet.cancel"
	// EventSpawnPlaced asks another host of the fleet to start an agent
	// registered for it (issue 24's placement): agent, parent, host, by.
	// The agent's process spec is in its row, never in the event.
	EventSpawnPlaced = "spawn.placed"
	// EventSpawnEscalated records a spawn the asker's role may not make
	// itself, placed under the nearest ancestor whose role may (seed 002
	// §4.1): requested_by, parent, child, role.
	EventSpawnEscalated = "spawn.escalated"

	// The permission authority's events (seed 001, seed 003).
	EventAgentPromoted   = "agent.promoted"   // agent, from, to, by: a stage change
	EventToolDenied      = "tool.denied"      // agent, tool, reason: kin authorize said no
	EventAgentUsage      = "agent.usage"      // agent, tokens, cost: reported spend
	EventBudgetExhausted = "budget.exhausted" // agent, reason, detail: its subtree is being stopped
	EventAgentMessage    = "agent.message"    // from, to, session, text (seed 003 §5); Agent is the recipient
	// EventModelCall is one call an agent made to a model through kin's
	// gateway (issue 25): agent, api, upstream, model, tokens, cost,
	// latency, status; never the prompt or the completion.
	EventModelCall = "model.call"
)

// EventTypes are every event type kin records, for checking a filter.
var EventTypes = []string{
	EventAgentRegistered, EventChildSpawned, EventAgentStatus, EventSpawnRejected, EventCircuitOpen,
	EventGovernorChanged, EventAgentStarted, EventAgentExited, EventChildCancel, EventAgentStop,
	EventAgentState, EventAgentOffline, EventAgentReplaced, EventAgentFailed, EventAgentAdopted,
	EventAgentLost, EventAgentResult, EventAgentPromoted, EventToolDenied, EventAgentUsage,
	EventBudgetExhausted, EventAgentMessage, EventModelCall, EventFleetCancel, EventSpawnPlaced, EventSpawnEscalated,
	EventGrant, EventTokenIssued, EventTokenRefused, EventTokenRevoked, EventKeysRotated,
}

// Event is one entry of the append-only event stream. On the wire it is a
// flat JSON object: seq, leaf_index (the event's leaf in the verifiable log,
// seq-1), time and type, then the type's own fields (Data), so that events
// keep the shape the seeds give them, e.g.
//
//	{"seq":7,"leaf_index":6,"time":"...","type":"agent.child.spawned","parent":1,"child":2,"generation":1}
//
// Agent and Parent are the agents the event concerns, kept apart for
// filtering; they are always also present in Data under the type's names.
type Event struct {
	Seq    int64
	Time   time.Time
	Type   string
	Agent  AgentID
	Parent AgentID
	Data   json.RawMessage // a JSON object
}

// Marshal is json.Marshal without HTML escaping: what kin stores (events in
// its store, lines of messages.jsonl). json.Marshal writes '<', '>' and '&'
// as 6-byte escapes, so a message of them would cost 6 bytes on disk for
// each byte quotas.message_bytes counts; control characters, quotes and
// backslashes stay escaped, as JSON requires.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// NewEvent builds an event of type typ about agent (and its parent, or 0)
// with fields marshalled from data, which must encode to a JSON object.
func NewEvent(typ string, agent, parent AgentID, data any) (Event, error) {
	b, err := Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", typ, err)
	}
	if len(b) == 0 || b[0] != '{' {
		return Event{}, fmt.Errorf("event %s: data must be a JSON object, got %s", typ, b)
	}
	return Event{Type: typ, Agent: agent, Parent: parent, Data: b}, nil
}

// MarshalJSON writes the flat form.
func (e Event) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	var leaf *int64 // the event's leaf in the verifiable log: seq-1
	if e.Seq > 0 {
		i := e.Seq - 1
		leaf = &i
	}
	head, err := json.Marshal(struct {
		Seq  int64     `json:"seq"`
		Leaf *int64    `json:"leaf_index,omitempty"`
		Time time.Time `json:"time"`
		Type string    `json:"type"`
	}{e.Seq, leaf, e.Time, e.Type})
	if err != nil {
		return nil, err
	}
	buf.Write(head[:len(head)-1])
	data := bytes.TrimSpace(e.Data)
	if len(data) > 2 { // more than "{}"
		if data[0] != '{' {
			return nil, fmt.Errorf("event %d data is not a JSON object", e.Seq)
		}
		buf.WriteByte(',')
		buf.Write(data[1:])
	} else {
		buf.WriteByte('}')
	}
	return buf.Bytes(), nil
}

// UnmarshalJSON reads the flat form. The fields "agent", "child" and
// "parent" fill Agent and Parent so that a decoded event filters like the
// original.
func (e *Event) UnmarshalJSON(b []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	var head struct {
		Seq  int64     `json:"seq"`
		Time time.Time `json:"time"`
		Type string    `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	var ids struct {
		Agent  AgentID `json:"agent"`
		Child  AgentID `json:"child"`
		Parent AgentID `json:"parent"`
	}
	_ = json.Unmarshal(b, &ids) // these fields are optional and may hold names in some event types
	delete(all, "seq")
	delete(all, "leaf_index")
	delete(all, "time")
	delete(all, "type")
	data, err := json.Marshal(all)
	if err != nil {
		return err
	}
	*e = Event{Seq: head.Seq, Time: head.Time, Type: head.Type, Agent: ids.Agent, Parent: ids.Parent, Data: data}
	if e.Agent == 0 {
		e.Agent = ids.Child
	}
	return nil
}

// Field decodes the named field of the event's data into v.
func (e Event) Field(name string, v any) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(e.Data, &all); err != nil {
		return err
	}
	raw, ok := all[name]
	if !ok {
		return fmt.Errorf("event %d (%s) has no field %q", e.Seq, e.Type, name)
	}
	return json.Unmarshal(raw, v)
}

// MaxEventLimit bounds one page of events.
const MaxEventLimit = 10000

// Validate checks the filter's values.
func (f EventFilter) Validate() error {
	if f.Since < 0 {
		return Errorf(ECodeInvalid, "since %d is negative", f.Since)
	}
	if f.Before < 0 {
		return Errorf(ECodeInvalid, "before %d is negative", f.Before)
	}
	if f.Agent < 0 {
		return Errorf(ECodeInvalid, "agent %d is not an agent id", f.Agent)
	}
	if f.Subject && f.Agent == 0 {
		return Errorf(ECodeInvalid, "subject narrows an agent's events: give the agent too")
	}
	if f.Limit < 0 || f.Limit > MaxEventLimit {
		return Errorf(ECodeInvalid, "limit %d is outside 0..%d", f.Limit, MaxEventLimit)
	}
	return nil
}

// EventFilter selects events. Since is exclusive: events with a sequence
// number greater than Since, so a reader passes back the last seq it saw.
type EventFilter struct {
	Agent AgentID `json:"agent,omitempty"` // events concerning this agent (as subject or parent)
	// Subject narrows Agent to the events whose subject it is, leaving out
	// those addressed to it as the parent of their subject.
	Subject bool  `json:"subject,omitempty"`
	Since   int64 `json:"since,omitempty"`
	// Before, when set, selects events with a sequence number less than
	// it and, with Limit, the last Limit of them: a page of history read
	// backwards (still returned oldest first).
	Before int64    `json:"before,omitempty"`
	Types  []string `json:"types,omitempty"`
	Limit  int      `json:"limit,omitempty"`
}
