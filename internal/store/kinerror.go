package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/kin-agents/kin/kin"
)

// msgWalletTaken is seed 000's message for the rule a wallet clash breaks
// (governor.MsgWalletTaken, which a test holds equal).
const msgWalletTaken = "Wallet already registered to another agent"

// KinError translates what a store call returned into what kin answers,
// once, for every service: a *kin.Error stays as it is, a sentinel becomes
// its kin error, a context's end stays itself, anything else is a store
// failure wrapped as such (ECodeInternal).
func KinError(err error) error {
	var ke *kin.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ke):
		return ke
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, ErrNameTaken):
		return kin.Errorf(kin.ECodeConflict, "the name is taken by a live agent")
	case errors.Is(err, ErrWalletTaken):
		return &kin.Error{Code: kin.ECodeWalletTaken, Message: msgWalletTaken}
	case errors.Is(err, ErrNotFound):
		return kin.Errorf(kin.ECodeNotFound, "not found")
	case errors.Is(err, ErrClosed):
		return kin.Errorf(kin.ECodeUnavailable, "the daemon is shutting down")
	}
	return fmt.Errorf("store: %w", err)
}

// AgentError is KinError for a call about agent id: not found names it.
func AgentError(err error, id kin.AgentID) error {
	if errors.Is(err, ErrNotFound) {
		return kin.Errorf(kin.ECodeNotFound, "agent %d not found", id)
	}
	return KinError(err)
}
