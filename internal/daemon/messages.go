package daemon

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Messaging between agents (seed 003 §5; seed 002: "all inter-agent
// communication passes through the Bus"). A message is an agent.message
// event addressed to its recipient (Agent) from its sender (Parent: 0 for
// the operator); the background writer appends it to the recipient
// session's messages.jsonl, like every other event it follows.

// messageData is the agent.message event, and the line of messages.jsonl.
type messageData struct {
	From    kin.AgentID `json:"from"`
	To      kin.AgentID `json:"to"`
	Session string      `json:"session"`
	Text    string      `json:"text"`
}

// Send appends a message to an agent's main session, or to req.Session.
// The operator may message anyone; an agent its parent, its children, and
// agents it shares a consented visibility edge with.
func (d *Daemon) Send(ctx context.Context, req kin.SendRequest) (*kin.Message, error) {
	c := callerOf(ctx)
	if c.refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.refused)
	}
	if req.Text == "" {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is empty")
	}
	if len(req.Text) > kin.MaxMessageLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is %d bytes long; at most %d are allowed", len(req.Text), kin.MaxMessageLen)
	}
	if !utf8.ValidString(req.Text) {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is not valid UTF-8")
	}
	to, err := d.agentByRef(ctx, req.To)
	if err != nil {
		return nil, err
	}
	if to.Status == kin.StatusTerminated || to.Status == kin.StatusRevoked {
		return nil, kin.Errorf(kin.ECodeInvalid, "agent %d (%s) is %s: it receives no messages", to.ID, to.Name, to.Status)
	}
	if c.agent != 0 && !d.mayMessage(c.agent, to) {
		return nil, kin.Errorf(kin.ECodeDenied, "agent %d may not message agent %d (%s): messages go between parent and child, or along an edge both agents consented to (visibility read_from and readable_to)", c.agent, to.ID, to.Name)
	}
	session := req.Session
	if session == "" {
		session = to.Session // its main session
		if session == "" {
			session = ctxfs.DefaultSession
		}
	}
	if _, err := kin.ParseName(session); err != nil {
		return nil, kin.Errorf(kin.ECodeInvalid, "session %q is not a session id (letters, digits and - _ . :)", session)
	}
	m := &kin.Message{From: c.agent, To: to.ID, Session: session, Text: req.Text, At: d.now()}
	err = d.store.Update(ctx, func(tx store.Tx) error {
		e, err := kin.NewEvent(kin.EventAgentMessage, to.ID, c.agent, messageData{From: c.agent, To: to.ID, Session: session, Text: req.Text})
		if err != nil {
			return err
		}
		e.Time = m.At
		e, err = tx.EventAppend(ctx, e)
		m.Seq = e.Seq
		return err
	})
	if err != nil {
		return nil, d.storeError(err)
	}
	return m, nil
}

// mayMessage says whether agent from may message to.
func (d *Daemon) mayMessage(from kin.AgentID, to *kin.Agent) bool {
	if to.Parent == from || d.lineage.parentOf(from) == to.ID {
		return true
	}
	fa, err := d.store.AgentGetByID(context.Background(), from)
	if err != nil {
		return false
	}
	names := func(a *kin.Agent) []string { return []string{a.Name, a.ID.String()} }
	consents := func(v *kin.Visibility, list func(*kin.Visibility) []string, other *kin.Agent) bool {
		if v == nil {
			return false
		}
		for _, n := range names(other) {
			if slices.Contains(list(v), n) {
				return true
			}
		}
		return false
	}
	readFrom := func(v *kin.Visibility) []string { return v.ReadFrom }
	readableTo := func(v *kin.Visibility) []string { return v.ReadableTo }
	fv, tv := d.visibility(from), d.visibility(to.ID)
	return consents(fv, readFrom, to) && consents(tv, readableTo, fa) ||
		consents(tv, readFrom, fa) && consents(fv, readableTo, to)
}

// Inbox calls fn for each message sent to an agent.
func (d *Daemon) Inbox(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
	id, err := d.target(ctx, req.Agent, "inbox")
	if err != nil {
		return err
	}
	f := kin.EventFilter{Agent: id, Since: req.Since, Types: []string{kin.EventAgentMessage}}
	each := func(e kin.Event) error {
		var m messageData
		if err := json.Unmarshal(e.Data, &m); err != nil || m.To != id {
			return nil // a message this agent sent
		}
		return fn(kin.Message{Seq: e.Seq, From: m.From, To: m.To, Session: m.Session, Text: m.Text, At: e.Time})
	}
	if req.Follow {
		return d.FollowEvents(ctx, f, each)
	}
	evs, err := d.Events(ctx, f)
	if err != nil {
		return err
	}
	for _, e := range evs {
		if err := each(e); err != nil {
			return err
		}
	}
	return nil
}

// messageLine is a message as a line of messages.jsonl.
func messageLine(e kin.Event) ([]byte, kin.AgentID, string, bool) {
	var m messageData
	if json.Unmarshal(e.Data, &m) != nil || m.To == 0 {
		return nil, 0, "", false
	}
	line, err := json.Marshal(struct {
		Seq  int64  `json:"seq"`
		Time string `json:"time"`
		Role string `json:"role"`
		messageData
	}{e.Seq, e.Time.UTC().Format(time.RFC3339Nano), sender(m.From), m})
	if err != nil {
		return nil, 0, "", false
	}
	return line, m.To, m.Session, true
}

// sender names who sent a message, as messages.jsonl's role.
func sender(id kin.AgentID) string {
	if id == 0 {
		return kin.Operator
	}
	return "agent:" + strconv.FormatInt(int64(id), 10)
}
