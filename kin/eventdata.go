package kin

import "time"

// The data of each event type: the fields of its JSON object beside seq,
// leaf_index, time and type (Event.Data). They are part of the verifiable
// log's leaves (the leaf is the event's canonical JSON), so a field once
// recorded keeps its name and meaning. EventData says which type each
// event's data has.

// AgentRegisteredData is the data of an EventAgentRegistered event.
type AgentRegisteredData struct {
	Agent       AgentID `json:"agent"`
	Name        string  `json:"name"`
	Role        string  `json:"role"`
	Creator     string  `json:"creator"`
	Responsible string  `json:"responsible"`
	Parent      AgentID `json:"parent"`
	Generation  int     `json:"generation"`
	Life        Life    `json:"life"`
	Replaces    AgentID `json:"replaces,omitempty"`
}

// ChildSpawnedData is the data of an EventChildSpawned event.
type ChildSpawnedData struct {
	Parent     AgentID `json:"parent"`
	Child      AgentID `json:"child"`
	Generation int     `json:"generation"`
}

// AgentStatusData is the data of an EventAgentStatus event.
type AgentStatusData struct {
	Agent       AgentID      `json:"agent"`
	From        Status       `json:"from"`
	To          Status       `json:"to"`
	Action      StatusAction `json:"action"`
	By          string       `json:"by"`
	Reason      string       `json:"reason,omitempty"`
	CascadeFrom AgentID      `json:"cascade_from,omitempty"`
}

// SpawnRejectedData is the data of an EventSpawnRejected event.
type SpawnRejectedData struct {
	Parent     AgentID   `json:"parent"`
	Name       string    `json:"name"`
	Role       string    `json:"role,omitempty"`
	Generation int       `json:"generation"`
	Code       ErrorCode `json:"code"`
	Message    string    `json:"message"`
	By         string    `json:"by"`
}

// CircuitOpenData is the data of an EventCircuitOpen event.
type CircuitOpenData struct {
	Agent      AgentID   `json:"agent"`
	Rejections int       `json:"rejections"`
	Window     Duration  `json:"window"`
	Until      time.Time `json:"until"`
}

// GovernorChangedData is the data of an EventGovernorChanged event.
type GovernorChangedData struct {
	Key  string `json:"key"`
	From int    `json:"from"`
	To   int    `json:"to"`
	By   string `json:"by"`
}

// AgentStartedData is the data of an EventAgentStarted event.
type AgentStartedData struct {
	Agent   AgentID  `json:"agent"`
	PID     int      `json:"pid"`
	Command []string `json:"command"`
}

// AgentExitedData is the data of an EventAgentExited event.
type AgentExitedData struct {
	Agent  AgentID `json:"agent"`
	State  State   `json:"state"`
	Reason string  `json:"reason"`
	Code   int     `json:"code"`
	Signal string  `json:"signal,omitempty"`
	Known  bool    `json:"known"`
}

// ChildCancelData is the data of an EventChildCancel event.
type ChildCancelData struct {
	Parent AgentID `json:"parent"`
	Child  AgentID `json:"child"`
	Reason string  `json:"reason"`
}

// FleetCancelData is the data of an EventFleetCancel event: the agents of
// Root's owned subtree that run on Host, which Host cancels (each with its
// own owned subtree there) with seed 001's sequence, recording each.
type FleetCancelData struct {
	Host   string    `json:"host"`
	Root   AgentID   `json:"root"`
	Agents []AgentID `json:"agents"`
	Reason string    `json:"reason"`
	Grace  *Duration `json:"grace,omitempty"` // nil: each agent's own
}

// SpawnPlacedData is the data of an EventSpawnPlaced event: agent Agent,
// registered by host By, is Host's to start. What it runs (command,
// environment, directory) is stored with the agent, not here.
type SpawnPlacedData struct {
	Agent  AgentID `json:"agent"`
	Parent AgentID `json:"parent"`
	Host   string  `json:"host"`
	By     string  `json:"by"`
}

// SpawnEscalatedData is the data of an EventSpawnEscalated event: agent
// RequestedBy asked for Child, of role Role, which the governor placed
// under Parent.
type SpawnEscalatedData struct {
	RequestedBy AgentID `json:"requested_by"`
	Parent      AgentID `json:"parent"`
	Child       AgentID `json:"child"`
	Role        string  `json:"role"`
}

// AgentStopData is the data of an EventAgentStop event.
type AgentStopData struct {
	Agent  AgentID `json:"agent"`
	Status string  `json:"status"`
}

// AgentStateData is the data of an EventAgentState event.
type AgentStateData struct {
	Agent AgentID `json:"agent"`
	From  State   `json:"from"`
	To    State   `json:"to"`
}

// AgentOfflineData is the data of an EventAgentOffline event: the agent
// missed its heartbeats, or (Host set) the host that runs it let its lease
// expire (killed, or cut off from the store), when From is the state it
// had, which it gets back if its host re-adopts it.
type AgentOfflineData struct {
	Agent         AgentID   `json:"agent"`
	Parent        AgentID   `json:"parent"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Cursor        string    `json:"cursor,omitempty"`
	Host          string    `json:"host,omitempty"`
	From          State     `json:"from,omitempty"`
}

// AgentReplacedData is the data of an EventAgentReplaced event.
type AgentReplacedData struct {
	Agent       AgentID `json:"agent"`
	Replacement AgentID `json:"replacement"`
	Cursor      string  `json:"cursor,omitempty"`
	Reason      string  `json:"reason"`
	Restarts    int     `json:"restarts"`
}

// AgentFailedData is the data of an EventAgentFailed event.
type AgentFailedData struct {
	Agent  AgentID `json:"agent"`
	Parent AgentID `json:"parent"`
	Reason string  `json:"reason"`
	Detail string  `json:"detail,omitempty"`
}

// AgentAdoptedData is the data of an EventAgentAdopted event.
type AgentAdoptedData struct {
	Agent AgentID `json:"agent"`
	PID   int     `json:"pid"`
}

// AgentLostData is the data of an EventAgentLost event.
type AgentLostData struct {
	Agent AgentID `json:"agent"`
	PID   int     `json:"pid"`
}

// AgentResultData is the data of an EventAgentResult event.
type AgentResultData struct {
	Agent      AgentID      `json:"agent"`
	Parent     AgentID      `json:"parent"`
	Status     ResultStatus `json:"status"`
	Violations []string     `json:"violations,omitempty"`
}

// AgentPromotedData is the data of an EventAgentPromoted event.
type AgentPromotedData struct {
	Agent AgentID `json:"agent"`
	From  string  `json:"from"`
	To    string  `json:"to"`
	By    string  `json:"by"`
}

// ToolDeniedData is the data of an EventToolDenied event.
type ToolDeniedData struct {
	Agent  AgentID `json:"agent"`
	Tool   string  `json:"tool"`
	Reason string  `json:"reason"`
}

// AgentUsageData is the data of an EventAgentUsage event.
type AgentUsageData struct {
	Agent  AgentID `json:"agent"`
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// ModelCallData is the data of an EventModelCall event: what the upstream's
// response said the call used, priced by the operator's price table.
type ModelCallData struct {
	Agent AgentID `json:"agent"`
	// API is "openai" or "anthropic"; Path the endpoint called
	// ("/v1/chat/completions").
	API      string `json:"api"`
	Path     string `json:"path"`
	Upstream string `json:"upstream"`
	Model    string `json:"model,omitempty"`
	Stream   bool   `json:"stream,omitempty"`
	// InputTokens counts every prompt token, CachedTokens those of them
	// read from the provider's cache; Tokens is what the call counts
	// against max_tokens (input plus output).
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CachedTokens int64   `json:"cached_tokens,omitempty"`
	Tokens       int64   `json:"tokens,omitempty"`
	Cost         float64 `json:"cost,omitempty"`
	// LatencyMS is from the call's arrival to the end of the upstream's
	// answer; Status the upstream's HTTP status (0: it never answered).
	LatencyMS float64 `json:"latency_ms"`
	Status    int     `json:"status"`
	// Error says why a call that reached no answer failed.
	Error string `json:"error,omitempty"`
}

// BudgetExhaustedData is the data of an EventBudgetExhausted event.
type BudgetExhaustedData struct {
	Agent  AgentID `json:"agent"`
	Reason string  `json:"reason"`
	Detail string  `json:"detail"`
}

// AgentMessageData is the data of an EventAgentMessage event, and a line of
// the recipient's messages.jsonl.
type AgentMessageData struct {
	From    AgentID `json:"from"`
	To      AgentID `json:"to"`
	Session string  `json:"session"`
	Text    string  `json:"text"`
}

// GrantData is the data of an EventGrant event.
type GrantData struct {
	Agent    AgentID   `json:"agent"`
	Resource string    `json:"resource"`
	Scope    string    `json:"scope"`
	Until    time.Time `json:"until,omitzero"`
	Action   string    `json:"action"`
	Revoked  int       `json:"revoked,omitempty"`
}

// TokenIssuedData is the data of an EventTokenIssued event.
type TokenIssuedData struct {
	Parent    AgentID   `json:"parent"`
	Agent     AgentID   `json:"agent"`
	Resource  string    `json:"resource"`
	Scope     string    `json:"scope"`
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expires_at"`
}

// TokenRefusedData is the data of an EventTokenRefused event.
type TokenRefusedData struct {
	Parent AgentID `json:"parent,omitempty"`
	Agent  AgentID `json:"agent,omitempty"`
	Code   string  `json:"code"`
	Detail string  `json:"detail"`
}

// TokenRevokedData is the data of an EventTokenRevoked event.
type TokenRevokedData struct {
	Agent  AgentID  `json:"agent"`
	Parent AgentID  `json:"parent"`
	JTIs   []string `json:"jtis"`
	Reason string   `json:"reason"`
}

// KeysRotatedData is the data of an EventKeysRotated event.
type KeysRotatedData struct {
	Role string `json:"role"`
	KID  string `json:"kid"`
	// Host is the host of the fleet whose keys changed (its new key, or
	// its first at its first start).
	Host string `json:"host,omitempty"`
}

// EventData returns a new value of the data type of event type typ, to
// unmarshal an event's Data into, or nil for a type kin does not record.
func EventData(typ string) any {
	switch typ {
	case EventAgentRegistered:
		return new(AgentRegisteredData)
	case EventChildSpawned:
		return new(ChildSpawnedData)
	case EventAgentStatus:
		return new(AgentStatusData)
	case EventSpawnRejected:
		return new(SpawnRejectedData)
	case EventCircuitOpen:
		return new(CircuitOpenData)
	case EventGovernorChanged:
		return new(GovernorChangedData)
	case EventAgentStarted:
		return new(AgentStartedData)
	case EventAgentExited:
		return new(AgentExitedData)
	case EventChildCancel:
		return new(ChildCancelData)
	case EventFleetCancel:
		return new(FleetCancelData)
	case EventSpawnPlaced:
		return new(SpawnPlacedData)
	case EventSpawnEscalated:
		return new(SpawnEscalatedData)
	case EventAgentStop:
		return new(AgentStopData)
	case EventAgentState:
		return new(AgentStateData)
	case EventAgentOffline:
		return new(AgentOfflineData)
	case EventAgentReplaced:
		return new(AgentReplacedData)
	case EventAgentFailed:
		return new(AgentFailedData)
	case EventAgentAdopted:
		return new(AgentAdoptedData)
	case EventAgentLost:
		return new(AgentLostData)
	case EventAgentResult:
		return new(AgentResultData)
	case EventAgentPromoted:
		return new(AgentPromotedData)
	case EventToolDenied:
		return new(ToolDeniedData)
	case EventAgentUsage:
		return new(AgentUsageData)
	case EventBudgetExhausted:
		return new(BudgetExhaustedData)
	case EventModelCall:
		return new(ModelCallData)
	case EventAgentMessage:
		return new(AgentMessageData)
	case EventGrant:
		return new(GrantData)
	case EventTokenIssued:
		return new(TokenIssuedData)
	case EventTokenRefused:
		return new(TokenRefusedData)
	case EventTokenRevoked:
		return new(TokenRevokedData)
	case EventKeysRotated:
		return new(KeysRotatedData)
	}
	return nil
}
