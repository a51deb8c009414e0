package store

import (
	"context"
	"time"

	"github.com/kin-agents/kin/kin"
)

// AppendEvent appends an event of type typ about agent (and parent) with
// data (one of package kin's event data types) at time at, in tx.
func AppendEvent(ctx context.Context, tx Tx, at time.Time, typ string, agent, parent kin.AgentID, data any) error {
	e, err := kin.NewEvent(typ, agent, parent, data)
	if err != nil {
		return err
	}
	e.Time = at
	_, err = tx.EventAppend(ctx, e)
	return err
}
