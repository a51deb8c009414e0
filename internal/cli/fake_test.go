package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kin-agents/kin/kin"
)

// fakeService is a kin.Service a test scripts, for the commands whose
// subject here is the command line (flags, output, exit statuses): what the
// daemon answers is tested in internal/daemon. Methods not scripted panic
// (the embedded interface is nil).
type fakeService struct {
	kin.Service
	whoami  *kin.Agent
	results map[kin.AgentID]*kin.AgentResult // Wait and Result answer these; others are not_found
	waitErr error                            // when set, Wait answers it
	packs   map[kin.AgentID]*kin.ContextPack

	waits  []kin.WaitRequest
	spawns []kin.SpawnRequest

	// The permission authority's methods.
	agents      map[kin.AgentID]*kin.Agent       // Agent and Promote answer these; others are not_found
	policies    map[kin.AgentID]*kin.AgentPolicy // Policy answers these; others are policyErr or not_found
	policyErr   error
	denied      map[string]string // Authorize denies these tools, with the reason; others are allowed
	authErr     error             // when set, Authorize answers it
	explanation *kin.Explanation  // Explain answers it, with the request's agent, tool and path
	spend       *kin.Spend        // Usage answers it
	files       map[string]string // ReadFile answers these, by "owner:path"; others are permission_denied
	inbox       []kin.Message     // Inbox calls fn with each of these after req.Since
	following   chan struct{}     // closed when a followed Inbox has sent them and waits
	forest      []*kin.TreeNode   // Tree answers it
	err         error             // when set, Register, Usage, Promote, Send and Inbox answer it

	registers  []kin.RegisterRequest
	authorizes []kin.AuthorizeRequest
	explains   []kin.ExplainRequest
	usages     []kin.UsageRequest
	promotes   []kin.PromoteRequest
	reads      []kin.ReadRequest
	sends      []kin.SendRequest
	inboxes    []kin.InboxRequest
}

func (f *fakeService) Register(_ context.Context, req kin.RegisterRequest) (*kin.Agent, error) {
	f.registers = append(f.registers, req)
	if f.err != nil {
		return nil, f.err
	}
	return &kin.Agent{ID: 9, Name: req.Name, Role: req.Role, Parent: req.Parent, Responsible: req.Responsible, Stage: req.Stage,
		Status: kin.StatusActive, State: kin.StateRegistered, Life: kin.LifeOwned, CreatedBy: kin.Operator}, nil
}

func (f *fakeService) Agent(_ context.Context, id kin.AgentID) (*kin.Agent, error) {
	if a, ok := f.agents[id]; ok {
		return a, nil
	}
	return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
}

// Agents answers a name filter from agents (names resolve as the daemon
// resolves them); other filters are not scripted.
func (f *fakeService) Agents(_ context.Context, fl kin.AgentFilter) ([]*kin.Agent, error) {
	if fl.Name == "" {
		panic("fakeService.Agents: only the name filter is scripted")
	}
	var out []*kin.Agent
	for _, a := range f.agents {
		if a.Name == fl.Name {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeService) Tree(context.Context, kin.AgentID) ([]*kin.TreeNode, error) {
	return f.forest, nil
}

func (f *fakeService) Policy(_ context.Context, id kin.AgentID) (*kin.AgentPolicy, error) {
	if p, ok := f.policies[id]; ok {
		return p, nil
	}
	if f.policyErr != nil {
		return nil, f.policyErr
	}
	return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
}

func (f *fakeService) Authorize(_ context.Context, req kin.AuthorizeRequest) (*kin.Decision, error) {
	f.authorizes = append(f.authorizes, req)
	if f.authErr != nil {
		return nil, f.authErr
	}
	if why, ok := f.denied[req.Tool]; ok {
		return &kin.Decision{Allowed: false, Reason: why, Rule: "deny " + req.Tool, Source: kin.SourcePolicy, Agent: 3}, nil
	}
	return &kin.Decision{Allowed: true, Reason: req.Tool + " is allowed by agent 3's policy", Rule: "allow *", Source: kin.SourcePolicy, Agent: 3}, nil
}

func (f *fakeService) Explain(_ context.Context, req kin.ExplainRequest) (*kin.Explanation, error) {
	f.explains = append(f.explains, req)
	if _, ok := f.agents[req.Agent]; !ok {
		return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", req.Agent)
	}
	e := *f.explanation
	e.Agent, e.Tool, e.Path = req.Agent, req.Tool, req.Path
	return &e, nil
}

func (f *fakeService) Usage(_ context.Context, req kin.UsageRequest) (*kin.Spend, error) {
	f.usages = append(f.usages, req)
	if f.err != nil {
		return nil, f.err
	}
	return f.spend, nil
}

func (f *fakeService) Promote(_ context.Context, req kin.PromoteRequest) (*kin.Agent, error) {
	f.promotes = append(f.promotes, req)
	if f.err != nil {
		return nil, f.err
	}
	a, err := f.Agent(context.Background(), req.Agent)
	if err != nil {
		return nil, err
	}
	b := *a
	b.Stage = req.Stage
	return &b, nil
}

func (f *fakeService) ReadFile(_ context.Context, req kin.ReadRequest) ([]byte, error) {
	f.reads = append(f.reads, req)
	if data, ok := f.files[req.Owner+":"+req.Path]; ok {
		return []byte(data), nil
	}
	return nil, kin.Errorf(kin.ECodeDenied, "agent %s does not let you read %s", req.Owner, req.Path)
}

func (f *fakeService) Send(_ context.Context, req kin.SendRequest) (*kin.Message, error) {
	f.sends = append(f.sends, req)
	if f.err != nil {
		return nil, f.err
	}
	session := req.Session
	if session == "" {
		session = "default"
	}
	return &kin.Message{Seq: 42, From: 0, To: 5, Session: session, Text: req.Text, At: time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC)}, nil
}

func (f *fakeService) Inbox(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
	f.inboxes = append(f.inboxes, req)
	if f.err != nil {
		return f.err
	}
	for _, m := range f.inbox {
		if m.Seq > req.Since {
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	if req.Follow {
		if f.following != nil {
			close(f.following)
		}
		<-ctx.Done() // a follower stops by being interrupted
		return ctx.Err()
	}
	return nil
}

func (f *fakeService) Whoami(context.Context) (*kin.Agent, error) { return f.whoami, nil }

func (f *fakeService) Wait(_ context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
	f.waits = append(f.waits, req)
	if f.waitErr != nil {
		return nil, f.waitErr
	}
	return f.Result(context.Background(), req.ID)
}

func (f *fakeService) Result(_ context.Context, id kin.AgentID) (*kin.AgentResult, error) {
	if r, ok := f.results[id]; ok {
		return r, nil
	}
	return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
}

func (f *fakeService) ContextPack(_ context.Context, id kin.AgentID) (*kin.ContextPack, error) {
	if p, ok := f.packs[id]; ok {
		return p, nil
	}
	return nil, kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
}

func (f *fakeService) Spawn(_ context.Context, req kin.SpawnRequest) (*kin.Agent, error) {
	f.spawns = append(f.spawns, req)
	return &kin.Agent{ID: 8, Name: req.Name, Command: req.Command}, nil
}

// runFake runs the CLI against svc with stdin.
func runFake(t *testing.T, svc kin.Service, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Service: svc}.Run(context.Background(), args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// childResult is a result in the shape the daemon returns.
func childResult(id kin.AgentID, status kin.ResultStatus, result string, violations ...string) *kin.AgentResult {
	return &kin.AgentResult{
		Agent:      &kin.Agent{ID: id, Name: "rev-123", Parent: 7, State: kin.StateExited, Result: status},
		Status:     status,
		Dir:        "/ctx/home/1000/agent/lead/session/s1/context/child/rev-123",
		Result:     result,
		Refs:       []kin.Ref{},
		Violations: append([]string{}, violations...),
	}
}
