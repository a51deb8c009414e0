package kin

import (
	"fmt"
	"strings"
	"time"
)

// RestartPolicy says when the supervisor replaces an agent whose process
// ended (seed 002 §5.2 crash recovery).
type RestartPolicy string

const (
	RestartNever     RestartPolicy = "never"      // default
	RestartOnFailure RestartPolicy = "on-failure" // after a crash (non-zero exit, a signal) or going offline
	RestartAlways    RestartPolicy = "always"     // after any end that is not a stop or a cancellation
)

// Valid reports whether p is one of the three policies.
func (p RestartPolicy) Valid() bool {
	return p == RestartNever || p == RestartOnFailure || p == RestartAlways
}

// Limits of a spawn request.
const (
	DefaultGrace   = 5 * time.Second
	MaxGrace       = time.Hour
	MaxArgs        = 1024
	MaxCommandSize = 256 << 10 // all arguments together
	MaxEnv         = 256
	MaxEnvSize     = 256 << 10
)

// SpawnRequest registers an agent and starts Command as its process. The
// registration fields follow the governor's rules exactly as Register's do.
// Parent 0 from inside an agent means the calling agent.
type SpawnRequest struct {
	RegisterRequest
	Command []string      `json:"command"`
	Env     []string      `json:"env,omitempty"`   // KEY=VALUE, added to the agent's base environment
	Dir     string        `json:"dir,omitempty"`   // working directory; default the agent's session directory
	Grace   *Duration     `json:"grace,omitempty"` // nil: DefaultGrace; 0: kill at once
	Restart RestartPolicy `json:"restart,omitempty"`
	// Handoff is what the parent hands the child (seed 001); nil: none.
	Handoff *Handoff `json:"handoff,omitempty"`
	// Host is the host of the fleet that runs the agent (issue 24). ""
	// places it on its parent's host when the parent is an agent running
	// on one, else on the host that received the request. The named
	// host's daemon starts the process; the spawn answers once it runs.
	Host string `json:"host,omitempty"`
}

// ValidateProcess checks the process part of the request (the registration
// part is RegisterRequest.Validate, which needs the name filled in).
func (r *SpawnRequest) ValidateProcess() error {
	if len(r.Command) == 0 || r.Command[0] == "" {
		return Errorf(ECodeInvalid, "command is empty: give the program to run after --")
	}
	if len(r.Command) > MaxArgs {
		return Errorf(ECodeInvalid, "command has %d arguments; at most %d are allowed", len(r.Command), MaxArgs)
	}
	size := 0
	for i, a := range r.Command {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return Errorf(ECodeInvalid, "command argument %d contains a NUL byte", i)
		}
	}
	if size > MaxCommandSize {
		return Errorf(ECodeInvalid, "command is %d bytes long; at most %d are allowed", size, MaxCommandSize)
	}
	if len(r.Env) > MaxEnv {
		return Errorf(ECodeInvalid, "%d environment variables; at most %d are allowed", len(r.Env), MaxEnv)
	}
	size = 0
	for _, kv := range r.Env {
		size += len(kv)
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(kv, "\x00") || strings.ContainsAny(k, " \t\n") {
			return Errorf(ECodeInvalid, "environment entry %q is not KEY=VALUE", kv)
		}
		if strings.HasPrefix(k, "KIN_") {
			return Errorf(ECodeInvalid, "environment variable %s is kin's own: kin sets KIN_* itself", k)
		}
	}
	if size > MaxEnvSize {
		return Errorf(ECodeInvalid, "the environment is %d bytes long; at most %d are allowed", size, MaxEnvSize)
	}
	if strings.IndexByte(r.Dir, 0) >= 0 {
		return Errorf(ECodeInvalid, "dir contains a NUL byte")
	}
	if r.Grace != nil && (*r.Grace < 0 || time.Duration(*r.Grace) > MaxGrace) {
		return Errorf(ECodeInvalid, "grace %s is outside 0..%s", time.Duration(*r.Grace), MaxGrace)
	}
	if r.Restart != "" && !r.Restart.Valid() {
		return Errorf(ECodeInvalid, "restart %q is not one of never, on-failure, always", r.Restart)
	}
	if r.Host != "" {
		if err := ValidateHostName(r.Host); err != nil {
			return Errorf(ECodeInvalid, "host: %s", ErrorMessageOf(err))
		}
	}
	return nil
}

// StopRequest stops an agent's process and cancels its owned subtree.
type StopRequest struct {
	ID AgentID `json:"id"`
	// Grace overrides each agent's own grace between SIGTERM and SIGKILL
	// when set (0 is "kill at once").
	Grace *Duration `json:"grace,omitempty"`
}

// HeartbeatRequest reports that an agent is alive, with its last cursor
// (seed 002 §5.2: where a replacement resumes).
type HeartbeatRequest struct {
	ID     AgentID `json:"id,omitempty"` // 0: the calling agent
	Cursor string  `json:"cursor,omitempty"`
}

// MaxCursorLen bounds a heartbeat cursor.
const MaxCursorLen = 4096

// LogsRequest reads an agent's captured stdout and stderr.
type LogsRequest struct {
	ID     AgentID `json:"id"`
	Offset int64   `json:"offset,omitempty"` // bytes to skip
	Tail   int64   `json:"tail,omitempty"`   // only the last this many bytes (a start no earlier than Offset)
	Follow bool    `json:"follow,omitempty"` // keep reading until the agent ends or ctx is done
}

// AgentResources is what a running agent's cgroups account for at At.
// CPU is cumulative: a reader takes two samples for a rate.
type AgentResources struct {
	Agent AgentID   `json:"agent"`
	At    time.Time `json:"at"`
	// CPUUsec is the CPU time of the agent's own processes (cpu.stat
	// usage_usec); SubtreeCPUUsec adds that of its descendants.
	CPUUsec        int64 `json:"cpu_usage_usec"`
	SubtreeCPUUsec int64 `json:"subtree_cpu_usage_usec"`
	// MemoryBytes is its subtree's memory.current, absent where the
	// memory controller is not enabled; Pids its subtree's tasks
	// (pids.current, or cgroup.threads counted where that controller is
	// not enabled).
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	Pids        *int64 `json:"pids,omitempty"`
	// Limits are the kernel limits that bind it (as in its effective
	// policy), for usage against limits.
	Limits []ResourceLimit `json:"limits,omitempty"`
}

// Exit describes how an agent's process ended.
type Exit struct {
	Code   int    `json:"code"`             // -1 when a signal ended it or the status is unknown
	Signal string `json:"signal,omitempty"` // e.g. "killed", "terminated"
	Known  bool   `json:"known"`            // false when the status could not be collected (re-adopted after a daemon restart)
}

func (e Exit) String() string {
	switch {
	case !e.Known:
		return "unknown"
	case e.Signal != "":
		return "signal " + e.Signal
	}
	return fmt.Sprintf("exit %d", e.Code)
}
