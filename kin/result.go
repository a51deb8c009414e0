package kin

import (
	"encoding/json"
	"time"
)

// Handoff is what a parent hands a child at spawn (seed 001, "Handoff
// Protocol"): the task (handoff.md), input refs with the sha256 the parent
// saw, and the output contract. The policy and mount subsets are the
// child's effective policy, which kin writes itself (RegisterRequest.Policy
// asks for it). The daemon
// validates it wholly before anything is created; the formats are those of
// the handoff files the child receives.
type Handoff struct {
	Task string `json:"task"` // handoff.md, verbatim
	// Refs are absolute, clean paths, each with "sha256:<hex>".
	Refs []Ref `json:"refs,omitempty"`
	// Contract is contract.json: the sections result.md must hold and the
	// artifacts the child must produce. Absent: a non-empty result.md with
	// a non-empty Summary.
	Contract json.RawMessage `json:"contract,omitempty"`
}

// Ref is one line of a refs.jsonl: a file, its hash, what it is.
type Ref struct {
	Path    string `json:"path"`
	Hash    string `json:"hash,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// ResultStatus is where a child's result stands: the status file of
// context/child/<child>/ in its parent's session, and Agent.Result.
type ResultStatus string

const (
	ResultRunning          ResultStatus = "running"           // handed off, not ended
	ResultCompleted        ResultStatus = "completed"         // ended; result meets its contract, refs verified
	ResultContractViolated ResultStatus = "contract_violated" // ended; result kept but fails its contract or its refs
	ResultFailed           ResultStatus = "failed"            // ended without success (crash, non-zero exit, start failure)
	ResultCancelled        ResultStatus = "cancelled"         // its runtime was cancelled (parent death, stop)
	// ResultNone is said (by kin mcp's wait_agent and get_result) of an
	// agent that hands no result back (it had no handoff): its state and
	// exit say how it ended.
	ResultNone ResultStatus = "none"
)

// Ended reports whether the result is final.
func (s ResultStatus) Ended() bool { return s != "" && s != ResultRunning }

// AgentResult is what a child handed back, as kin checked and kept it.
type AgentResult struct {
	Agent  *Agent       `json:"agent"`
	Status ResultStatus `json:"status"`
	// Dir is where kin keeps the result: the parent's
	// context/child/<child>/, or for an agent without a parent session its
	// own session's output/.
	Dir string `json:"dir,omitempty"`
	// Result is result.md (empty when the child wrote none).
	Result string `json:"result"`
	// Refs are the result's refs, each hash the one kin computed.
	Refs []Ref `json:"refs"`
	// Violations say what the result lacks against its contract, one a line.
	Violations []string `json:"violations"`
}

// WaitRequest waits for an agent to end.
type WaitRequest struct {
	ID      AgentID  `json:"id"`
	Timeout Duration `json:"timeout,omitempty"` // 0: no limit but the caller's
}

// MaxWait bounds one wait request; clients wait longer by asking again.
const MaxWait = 24 * time.Hour

// ContextPack is what a parent's context should include about its
// children (seed 001): each child's status, task, result.md, its refs
// summarised and its needed artifacts; never a child's messages.jsonl.
type ContextPack struct {
	Agent    AgentID         `json:"agent"`
	Text     string          `json:"text"`     // Markdown
	Children json.RawMessage `json:"children"` // the same, as JSON
}
