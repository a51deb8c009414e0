# Shared by the hierarchy's agents (sourced, not run): examples/lib/kin-agent.sh
# (here, me, child, collect, quote) and go_ahead.
. "$(dirname "$0")/../lib/kin-agent.sh"

# go_ahead: waits for the parent's "go" (kin send), so that the parent
# decides how long its children stay live.
go_ahead() { kin inbox --follow --max 1 > /dev/null; }
