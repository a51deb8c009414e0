package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/kin-agents/kin/kin"
)

func (c *Client) LogCheckpoint(ctx context.Context) (*kin.LogCheckpoint, error) {
	var cp kin.LogCheckpoint
	if err := c.do(ctx, "GET", "/v1/log/checkpoint", nil, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

func (c *Client) LogCheckpoints(ctx context.Context) ([]kin.LogCheckpoint, error) {
	var cps []kin.LogCheckpoint
	if err := c.do(ctx, "GET", "/v1/log/checkpoints", nil, &cps); err != nil {
		return nil, err
	}
	return cps, nil
}

func (c *Client) LogProof(ctx context.Context, seq int64) (*kin.LogProof, error) {
	var p kin.LogProof
	if err := c.do(ctx, "GET", "/v1/log/proof?seq="+strconv.FormatInt(seq, 10), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (c *Client) LogConsistency(ctx context.Context, from, to int64) (*kin.LogConsistency, error) {
	q := url.Values{"from": {strconv.FormatInt(from, 10)}}
	if to != 0 {
		q.Set("to", strconv.FormatInt(to, 10))
	}
	var p kin.LogConsistency
	if err := c.do(ctx, "GET", "/v1/log/consistency"+query(q), nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (c *Client) LogLeaves(ctx context.Context, from int64, limit int) ([]string, error) {
	q := url.Values{"from": {strconv.FormatInt(from, 10)}}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Leaves []string `json:"leaves"`
	}
	if err := c.do(ctx, "GET", "/v1/log/leaves"+query(q), nil, &out); err != nil {
		return nil, err
	}
	return out.Leaves, nil
}

func (c *Client) LogVerify(ctx context.Context, req kin.LogVerifyRequest) (*kin.LogReport, error) {
	var r kin.LogReport
	if err := c.do(ctx, "POST", "/v1/log/verify", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) AncestryProof(ctx context.Context, id kin.AgentID) (*kin.AncestryProof, error) {
	var p kin.AncestryProof
	if err := c.do(ctx, "GET", "/v1/agents/"+id.String()+"/ancestry-proof", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
