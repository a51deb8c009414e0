package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

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
