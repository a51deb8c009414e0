package client

import (
	"context"
	"fmt"
	"time"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// LogsErrorTrailer is the HTTP trailer in which the daemon reports an error
// that ended a log or inbox stream after its 200 answer was sent, as a JSON
// kin.Error.
const LogsErrorTrailer = "Kin-Error"

func (c *Client) Spawn(ctx context.Context, req kin.SpawnRequest) (*kin.Agent, error) {
	var a kin.Agent
	if err := c.do(ctx, "POST", "/v1/spawn", req, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// stopBody is the body of POST /v1/agents/{id}/stop.
type stopBody struct {
	Grace *kin.Duration `json:"grace,omitempty"`
}

func (c *Client) Stop(ctx context.Context, req kin.StopRequest) ([]*kin.Agent, error) {
	var out []*kin.Agent
	return out, c.do(ctx, "POST", "/v1/agents/"+req.ID.String()+"/stop", stopBody{Grace: req.Grace}, &out)
}

func (c *Client) Heartbeat(ctx context.Context, req kin.HeartbeatRequest) (*kin.Agent, error) {
	var a kin.Agent
	if err := c.do(ctx, "POST", "/v1/heartbeat", req, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Logs reads the raw output stream and calls fn with each chunk as it
// arrives. It returns nil when the daemon ends the stream cleanly: at once
// without Follow, once the agent has ended and everything was sent with it.
func (c *Client) Logs(ctx context.Context, req kin.LogsRequest, fn func([]byte) error) error {
	resp, err := c.send(ctx, "GET", "/v1/agents/"+req.ID.String()+"/logs"+query(httpapi.LogsQuery(req)), nil, "text/plain")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := httpapi.ReadLogStream(ctx, resp.Body, fn, func(err error) error {
		return &kin.Error{Code: kin.ECodeUnavailable, Message: fmt.Sprintf("the log stream from %s broke: %v", c.where, err)}
	}); err != nil {
		return err
	}
	// Trailers are read with the end of the body.
	if t := resp.Trailer.Get(LogsErrorTrailer); t != "" {
		return trailerError("log stream", t)
	}
	return nil
}

// Whoami returns the agent the daemon sees as the caller (the one whose
// socket KIN_SOCKET names), or nil for the operator.
func (c *Client) Whoami(ctx context.Context) (*kin.Agent, error) {
	var a *kin.Agent
	if err := c.do(ctx, "GET", "/v1/whoami", nil, &a); err != nil {
		return nil, err
	}
	return a, nil
}

// waitBody is the body of POST /v1/agents/{id}/wait.
type waitBody struct {
	Timeout kin.Duration `json:"timeout,omitempty"`
}

// Wait blocks until agent req.ID has ended and its result is kept. The
// daemon takes a timeout of at most kin.MaxWait, so a longer one is asked
// for in turns; without one (0) ctx alone bounds the wait, and a timeout
// the daemon answers all the same is asked again. The client sets no HTTP
// timeout of its own.
func (c *Client) Wait(ctx context.Context, req kin.WaitRequest) (*kin.AgentResult, error) {
	path := "/v1/agents/" + req.ID.String() + "/wait"
	if req.Timeout > 0 && time.Duration(req.Timeout) <= kin.MaxWait {
		return c.wait(ctx, path, req.Timeout)
	}
	var deadline time.Time
	if req.Timeout > 0 {
		deadline = time.Now().Add(time.Duration(req.Timeout))
	}
	for {
		ask := kin.Duration(0)
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return nil, kin.Errorf(kin.ECodeTimeout, "agent %d has not ended within %s", req.ID, time.Duration(req.Timeout))
			}
			ask = kin.Duration(min(left, kin.MaxWait))
		}
		r, err := c.wait(ctx, path, ask)
		if kin.ErrorCodeOf(err) != kin.ECodeTimeout {
			return r, err
		}
	}
}

func (c *Client) wait(ctx context.Context, path string, timeout kin.Duration) (*kin.AgentResult, error) {
	var r kin.AgentResult
	if err := c.do(ctx, "POST", path, waitBody{Timeout: timeout}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) Result(ctx context.Context, id kin.AgentID) (*kin.AgentResult, error) {
	var r kin.AgentResult
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String()+"/result", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) ContextPack(ctx context.Context, id kin.AgentID) (*kin.ContextPack, error) {
	var p kin.ContextPack
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String()+"/context-pack", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Resources reads a running agent's cgroup accounting.
func (c *Client) Resources(ctx context.Context, id kin.AgentID) (*kin.AgentResources, error) {
	var r kin.AgentResources
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String()+"/resources", nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
