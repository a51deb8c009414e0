package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

func (c *Client) Policy(ctx context.Context, id kin.AgentID) (*kin.AgentPolicy, error) {
	var p kin.AgentPolicy
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String()+"/policy", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Authorize returns kin's decision; a denial is a Decision with Allowed
// false, not an error.
func (c *Client) Authorize(ctx context.Context, req kin.AuthorizeRequest) (*kin.Decision, error) {
	var d kin.Decision
	if err := c.do(ctx, "POST", "/v1/authorize", req, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Explain asks about req.Tool or req.Path; the daemon refuses a request
// with both or neither.
func (c *Client) Explain(ctx context.Context, req kin.ExplainRequest) (*kin.Explanation, error) {
	q := url.Values{}
	if req.Tool != "" {
		q.Set("tool", req.Tool)
	}
	if req.Path != "" {
		q.Set("path", req.Path)
	}
	var e kin.Explanation
	if err := c.do(ctx, "GET", "/v1/agents/"+req.Agent.String()+"/explain"+query(q), nil, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

func (c *Client) Usage(ctx context.Context, req kin.UsageRequest) (*kin.Spend, error) {
	var s kin.Spend
	if err := c.do(ctx, "POST", "/v1/usage", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// promoteBody is the body of POST /v1/agents/{id}/promote.
type promoteBody struct {
	Stage string `json:"stage"`
}

func (c *Client) Promote(ctx context.Context, req kin.PromoteRequest) (*kin.Agent, error) {
	var a kin.Agent
	if err := c.do(ctx, "POST", "/v1/agents/"+req.Agent.String()+"/promote", promoteBody{Stage: req.Stage}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// ReadFile returns the file's bytes as the daemon sent them.
func (c *Client) ReadFile(ctx context.Context, req kin.ReadRequest) ([]byte, error) {
	resp, err := c.send(ctx, "POST", "/v1/read", req, "application/octet-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &kin.Error{Code: kin.ECodeUnavailable, Message: fmt.Sprintf("reading %s of agent %s from %s broke off: %v", req.Path, req.Owner, c.where, err)}
	}
	return data, nil
}

func (c *Client) Send(ctx context.Context, req kin.SendRequest) (*kin.Message, error) {
	var m kin.Message
	if err := c.do(ctx, "POST", "/v1/messages", req, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Inbox reads the NDJSON stream of messages and calls fn with each. It
// returns nil when the daemon ends the stream cleanly, which without
// Follow is after the messages there are; a followed stream ends cleanly
// only when the daemon shuts down, which is reported as unavailable.
func (c *Client) Inbox(ctx context.Context, req kin.InboxRequest, fn func(kin.Message) error) error {
	resp, err := c.send(ctx, "GET", "/v1/inbox"+query(httpapi.InboxQuery(req)), nil, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	// A message's text is at most kin.MaxMessageLen bytes, which JSON may
	// escape to six bytes each.
	sc.Buffer(make([]byte, 64<<10), 6*kin.MaxMessageLen+64<<10)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue // a keep-alive
		}
		var m kin.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("kin sent an unreadable message: %w", err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return &kin.Error{Code: kin.ECodeUnavailable, Message: fmt.Sprintf("the inbox stream from %s broke: %v", c.where, err)}
	}
	// Trailers are read with the end of the body.
	if t := resp.Trailer.Get(LogsErrorTrailer); t != "" {
		return trailerError("inbox stream", t)
	}
	if req.Follow {
		return &kin.Error{Code: kin.ECodeUnavailable, Message: "kin ended the inbox stream (the daemon is shutting down)"}
	}
	return nil
}
