package caller

import (
	"context"
	"testing"

	"github.com/kin-agents/kin/kin"
)

func TestWhoMayActOnWhom(t *testing.T) {
	// 1 -> 2 -> 3; 4 is another root.
	parent := map[kin.AgentID]kin.AgentID{2: 1, 3: 2}
	isDescendant := func(id, ancestor kin.AgentID) bool {
		for p := parent[id]; p != 0; p = parent[p] {
			if p == ancestor {
				return true
			}
		}
		return false
	}
	op := context.Background()
	agent := func(id kin.AgentID) context.Context { return With(op, Caller{Agent: id}) }
	refused := With(op, Caller{Refused: "a process outside agent 2 used its socket"})
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		target kin.AgentID
		self   bool
		want   kin.ErrorCode
	}{
		{"the operator on anything", op, 3, false, ""},
		{"an agent on its grandchild", agent(1), 3, false, ""},
		{"an agent on itself, where allowed", agent(2), 2, true, ""},
		{"an agent on itself, where not", agent(2), 2, false, kin.ECodeForbidden},
		{"an agent on its parent", agent(2), 1, true, kin.ECodeForbidden},
		{"an agent on another tree", agent(1), 4, true, kin.ECodeForbidden},
		{"a refused connection on anything", refused, 3, true, kin.ECodeForbidden},
	} {
		err := MayActOn(tt.ctx, tt.target, tt.self, isDescendant)
		if tt.want == "" && err != nil || tt.want != "" && kin.ErrorCodeOf(err) != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	if OperatorOnly(op, "x") != nil || kin.ErrorCodeOf(OperatorOnly(agent(1), "change the governor")) != kin.ECodeForbidden ||
		kin.ErrorCodeOf(OperatorOnly(refused, "x")) != kin.ECodeForbidden {
		t.Error("OperatorOnly lets the wrong callers through")
	}
	if Of(op).CreatedBy() != kin.Operator || Of(agent(7)).CreatedBy() != kin.AgentCreatedBy(7) || !Of(op).Operator() || Of(refused).Operator() {
		t.Error("Operator or CreatedBy is wrong")
	}
}
