package client

import (
	"context"
	"net/url"

	"github.com/kin-agents/kin/kin"
)

func (c *Client) Token(ctx context.Context) (*kin.AgentToken, error) {
	var t kin.AgentToken
	if err := c.do(ctx, "GET", "/v1/token", nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

func (c *Client) Grant(ctx context.Context, req kin.GrantRequest) (*kin.Grant, error) {
	var g kin.Grant
	if err := c.do(ctx, "POST", "/v1/grants", req, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func (c *Client) Grants(ctx context.Context, agent kin.AgentID) ([]kin.Grant, error) {
	q := url.Values{}
	if agent != 0 {
		q.Set("agent", agent.String())
	}
	var gs []kin.Grant
	if err := c.do(ctx, "GET", "/v1/grants"+query(q), nil, &gs); err != nil {
		return nil, err
	}
	return gs, nil
}

func (c *Client) Ungrant(ctx context.Context, req kin.UngrantRequest) (*kin.Grant, error) {
	var g kin.Grant
	if err := c.do(ctx, "POST", "/v1/grants/delete", req, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

func (c *Client) AuthTokens(ctx context.Context, f kin.AuthTokenFilter) ([]kin.AuthToken, error) {
	q := url.Values{}
	if f.Agent != 0 {
		q.Set("agent", f.Agent.String())
	}
	if f.Expired {
		q.Set("expired", "true")
	}
	var ts []kin.AuthToken
	if err := c.do(ctx, "GET", "/v1/auth-tokens"+query(q), nil, &ts); err != nil {
		return nil, err
	}
	return ts, nil
}

// rotateBody is the body of POST /v1/keys/rotate.
type rotateBody struct {
	Role string `json:"role"`
}

func (c *Client) RotateKeys(ctx context.Context, role string) (*kin.KeyRotation, error) {
	var k kin.KeyRotation
	if err := c.do(ctx, "POST", "/v1/keys/rotate", rotateBody{Role: role}, &k); err != nil {
		return nil, err
	}
	return &k, nil
}
