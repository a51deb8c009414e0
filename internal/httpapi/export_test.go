package httpapi

import (
	"maps"

	"github.com/kin-agents/kin/kin"
)

// StatusTable exposes the code-to-status table to the external tests.
func StatusTable() map[kin.ErrorCode]int { return maps.Clone(statusOf) }
