package runner

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/kin-agents/kin/internal/handoff"
)

// TestCtxAgentSize: the daemon keeps a ctxAgent for every live agent, in
// the allocator's 512-byte size class (issue 22's memory: it was 640, with
// its handoff's contract inline, and a default contract allocated for every
// agent without one). An agent without a handoff is checked against the
// default contract all the same.
func TestCtxAgentSize(t *testing.T) {
	if n := unsafe.Sizeof(ctxAgent{}); n > 512 {
		t.Fatalf("ctxAgent is %d bytes: over the 512-byte size class", n)
	}
	c := &ctxAgent{}
	c.setHandoff(nil)
	if c.contract != nil || !reflect.DeepEqual(c.resultContract(), handoff.DefaultContract()) {
		t.Fatalf("without a handoff: contract %v, checked against %+v", c.contract, c.resultContract())
	}
	h := &handoff.Handoff{Contract: handoff.Contract{Sections: []handoff.SectionSpec{{Name: "Plan"}}}}
	c.setHandoff(h)
	h.Contract.Sections = nil
	if got := c.resultContract(); !c.hasHandoff || len(got.Sections) != 1 || got.Sections[0].Name != "Plan" {
		t.Fatalf("with a handoff: checked against %+v", got)
	}
	c.setHandoff(nil)
	if c.contract != nil {
		t.Fatal("a second setHandoff(nil) kept the earlier contract")
	}
}
