#!/bin/sh
# Seed 001's parent, for the README's walk-through: "coder" hands the review
# of the mount ABI section to a child "rev-123" (handoff.md, the spec as an
# input ref, an output contract), waits for the child's checked result and
# keeps it in its latest.md. The example files are seed 001's own
# (internal/handoff/testdata/seed001).
# A child starts in its own session directory: paths are made absolute from
# this script's own location, never left relative to where coder started.
here=$(cd "$(dirname "$0")" && pwd)
seed=$(cd "$here/../../internal/handoff/testdata/seed001" && pwd)
echo '{"role":"user","content":"review the mount ABI section"}' >> "$KIN_SESSION/messages.jsonl"
id=$(kin spawn --name rev-123 --role reviewer \
	--handoff "$seed/handoff.md" --ref "$seed/agent-tool-security.md" --contract "$seed/contract.json" \
	--env SEED="$seed" -- "$here/reviewer.sh" | awk '$1 == "ID" { print $2 }')
kin wait "$id" > "$KIN_SESSION/latest.md"
echo "coder: child $id ended: $(head -1 "$KIN_SESSION/latest.md")"
exec sleep 3600
