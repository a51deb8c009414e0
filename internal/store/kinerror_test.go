package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/internal/store"
	"github.com/kin-agents/kin/kin"
)

func TestKinError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		code kin.ErrorCode
	}{
		{fmt.Errorf("insert: %w", store.ErrNameTaken), kin.ECodeConflict},
		{store.ErrWalletTaken, kin.ECodeWalletTaken},
		{store.ErrNotFound, kin.ECodeNotFound},
		{store.ErrClosed, kin.ECodeUnavailable},
		{kin.Errorf(kin.ECodeBudget, "x"), kin.ECodeBudget},
		{errors.New("disk I/O error"), kin.ECodeInternal},
	} {
		if got := kin.ErrorCodeOf(store.KinError(tt.err)); got != tt.code {
			t.Errorf("KinError(%v) = %s, want %s", tt.err, got, tt.code)
		}
	}
	if store.KinError(nil) != nil || !errors.Is(store.KinError(context.Canceled), context.Canceled) {
		t.Error("nil or a context's end changed")
	}
	if kin.ErrorMessageOf(store.KinError(store.ErrWalletTaken)) != governor.MsgWalletTaken {
		t.Error("the wallet message is not seed 000's (governor.MsgWalletTaken)")
	}
	if m := kin.ErrorMessageOf(store.AgentError(store.ErrNotFound, 7)); m != "agent 7 not found" {
		t.Errorf("AgentError: %q", m)
	}
}
