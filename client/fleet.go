package client

import (
	"context"

	"github.com/kin-agents/kin/kin"
)

// Hosts lists the fleet's hosts (operator only).
func (c *Client) Hosts(ctx context.Context) ([]kin.Host, error) {
	var hs []kin.Host
	if err := c.do(ctx, "GET", "/v1/hosts", nil, &hs); err != nil {
		return nil, err
	}
	return hs, nil
}
