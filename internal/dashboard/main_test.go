package dashboard_test

import (
	"os"
	"testing"

	"github.com/kin-agents/kin/internal/kintest"
	"github.com/kin-agents/kin/internal/sandbox"
)

// TestMain lets the test binary serve as the sandbox shim of the agents the
// tests spawn (kintest points the daemon's ShimPath at a copy of it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.Subcommand {
		os.Exit(sandbox.Main(os.Args[2:], os.Stderr))
	}
	code := m.Run()
	kintest.RemoveAgentBinary()
	os.Exit(code)
}
