package exchange

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kin-agents/kin/internal/authority"
	"github.com/kin-agents/kin/internal/caller"
	"github.com/kin-agents/kin/internal/ctxfs"
	"github.com/kin-agents/kin/internal/lineage"
	"github.com/kin-agents/kin/internal/policy"
	"github.com/kin-agents/kin/internal/quota"
	"github.com/kin-agents/kin/internal/registry"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

// Exchange answers kin.ExchangeService: what agents share with consent.
type Exchange struct {
	st        store.Store
	lin       *lineage.Tree
	reg       *registry.Registry
	auth      *authority.Authority
	fs        *ctxfs.FS
	workspace func(a *kin.Agent) string
	clock     func() time.Time
	quota     *quota.Limiter
}

// Config is what an Exchange is built from.
type Config struct {
	Store     store.Store
	Lineage   *lineage.Tree
	Registry  *registry.Registry
	Authority *authority.Authority
	// FS is the agent filesystem, and Workspace an agent's workspace
	// directory in it.
	FS        *ctxfs.FS
	Workspace func(a *kin.Agent) string
	Clock     func() time.Time
	// Quota limits the size and rate of agents' messages (nil: none).
	Quota *quota.Limiter
}

// New makes an Exchange.
func New(c Config) *Exchange {
	return &Exchange{st: c.Store, lin: c.Lineage, reg: c.Registry, auth: c.Authority, fs: c.FS, workspace: c.Workspace, clock: c.Clock, quota: c.Quota}
}

func (x *Exchange) now() time.Time { return x.clock() }

// Messaging between agents (seed 003 §5; seed 002: "all inter-agent
// communication passes through the Bus"). A message is an agent.message
// event addressed to its recipient (Agent) from its sender (Parent: 0 for
// the operator); the background writer appends it to the recipient
// session's messages.jsonl, like every other event it follows.

// Send appends a message to an agent's main session, or to req.Session.
// The operator may message anyone; an agent its parent, its children, and
// agents it shares a consented visibility edge with.
func (x *Exchange) Send(ctx context.Context, req kin.SendRequest) (*kin.Message, error) {
	c := caller.Of(ctx)
	if c.Refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	if req.Text == "" {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is empty")
	}
	if len(req.Text) > kin.MaxMessageLen {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is %d bytes long; at most %d are allowed", len(req.Text), kin.MaxMessageLen)
	}
	if err := x.quota.CheckMessage(ctx, req.Text); err != nil {
		return nil, err
	}
	if !utf8.ValidString(req.Text) {
		return nil, kin.Errorf(kin.ECodeInvalid, "the message is not valid UTF-8")
	}
	to, err := x.reg.AgentByRef(ctx, req.To)
	if err != nil {
		return nil, err
	}
	if to.Status == kin.StatusTerminated || to.Status == kin.StatusRevoked {
		return nil, kin.Errorf(kin.ECodeInvalid, "agent %d (%s) is %s: it receives no messages", to.ID, to.Name, to.Status)
	}
	if c.Agent != 0 && !x.mayMessage(c.Agent, to) {
		return nil, kin.Errorf(kin.ECodeDenied, "agent %d may not message agent %d (%s): messages go between parent and child, or along an edge both agents consented to (visibility read_from and readable_to)", c.Agent, to.ID, to.Name)
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
	// Last before the write: a request refused for anything else spends
	// no token.
	if err := x.quota.Allow(ctx, quota.Messages); err != nil {
		return nil, err
	}
	m := &kin.Message{From: c.Agent, To: to.ID, Session: session, Text: req.Text, At: x.now()}
	err = store.UpdateAfter(ctx, x.st, func(tx store.Tx, _ *store.AfterCommit) error {
		e, err := kin.NewEvent(kin.EventAgentMessage, to.ID, c.Agent, kin.AgentMessageData{From: c.Agent, To: to.ID, Session: session, Text: req.Text})
		if err != nil {
			return err
		}
		e.Time = m.At
		e, err = tx.EventAppend(ctx, e)
		m.Seq = e.Seq
		return err
	})
	if err != nil {
		return nil, store.KinError(err)
	}
	return m, nil
}

// mayMessage says whether agent from may message to.
func (x *Exchange) mayMessage(from kin.AgentID, to *kin.Agent) bool {
	if to.Parent == from || x.lin.Parent(from) == to.ID {
		return true
	}
	fa, err := x.st.AgentGetByID(context.Background(), from)
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
	fv, tv := x.auth.Visibility(from), x.auth.Visibility(to.ID)
	return consents(fv, readFrom, to) && consents(tv, readableTo, fa) ||
		consents(tv, readFrom, fa) && consents(fv, readableTo, to)
}

// Inbox calls fn for each message sent to an agent.
func (x *Exchange) Inbox(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
	id, err := x.auth.Target(ctx, req.Agent, "inbox")
	if err != nil {
		return err
	}
	f := kin.EventFilter{Agent: id, Since: req.Since, Types: []string{kin.EventAgentMessage}}
	each := func(e kin.Event) error {
		var m kin.AgentMessageData
		if err := json.Unmarshal(e.Data, &m); err != nil || m.To != id {
			return nil // a message this agent sent
		}
		return fn(kin.Message{Seq: e.Seq, From: m.From, To: m.To, Session: m.Session, Text: m.Text, At: e.Time})
	}
	if req.Follow {
		return x.reg.FollowEvents(ctx, f, each)
	}
	evs, err := x.reg.Events(ctx, f)
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

// MaxReadFile bounds what kin read returns.
const MaxReadFile = 16 << 20

// ReadFile reads a file of another agent's workspace where both sides
// consent (seed 003 §4): read-only, same kin, glob-scoped. The path is
// cleaned and ".." refused before any match; nothing on the way is
// followed if it is a link.
func (x *Exchange) ReadFile(ctx context.Context, req kin.ReadRequest) ([]byte, error) {
	c := caller.Of(ctx)
	if c.Refused != "" {
		return nil, kin.Errorf(kin.ECodeForbidden, "%s", c.Refused)
	}
	readerID := req.Reader
	if c.Agent != 0 {
		if readerID != 0 && readerID != c.Agent {
			return nil, kin.Errorf(kin.ECodeForbidden, "agent %d may read only as itself", c.Agent)
		}
		readerID = c.Agent
	}
	if readerID == 0 {
		return nil, kin.Errorf(kin.ECodeInvalid, "read: name the reading agent (--as ID): consent is between agents")
	}
	reader, err := x.reg.Agent(ctx, readerID)
	if err != nil {
		return nil, err
	}
	owner, err := x.reg.AgentByRef(ctx, req.Owner)
	if err != nil {
		return nil, err
	}
	dec := policy.CanRead(reader.Name, reader.ID, x.auth.Visibility(reader.ID), owner.Name, owner.ID, x.auth.Visibility(owner.ID), req.Path)
	if !dec.Allowed {
		return nil, kin.Errorf(kin.ECodeDenied, "%s", dec.Reason)
	}
	rel := path.Clean(req.Path)
	data, err := x.readWorkspaceFile(owner, rel)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// readWorkspaceFile reads rel in owner's workspace, following no link
// (ctxfs walks every component with O_NOFOLLOW).
func (x *Exchange) readWorkspaceFile(owner *kin.Agent, rel string) ([]byte, error) {
	b, err := x.fs.ReadFile(filepath.Join(x.workspace(owner), rel), MaxReadFile)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, kin.Errorf(kin.ECodeNotFound, "%s:%s does not exist", owner.Name, rel)
	case errors.Is(err, ctxfs.ErrSymlink), errors.Is(err, syscall.ENOTDIR), errors.Is(err, ctxfs.ErrNotRegular):
		return nil, kin.Errorf(kin.ECodeDenied, "%s:%s passes through a link or is not a file: kin reads only regular files, following no link", owner.Name, rel)
	case errors.Is(err, ctxfs.ErrTooLarge):
		return nil, kin.Errorf(kin.ECodeInvalid, "%s:%s is larger than the %d bytes kin read returns", owner.Name, rel, MaxReadFile)
	}
	return nil, kin.Errorf(kin.ECodeDenied, "%s:%s: %v", owner.Name, rel, err)
}
