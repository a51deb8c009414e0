#!/bin/sh
# Peer-Reviewer (generation 1): checks the report it was handed: it accepts
# a report that has findings from both the web and the API.
. "$(dirname "$0")/lib.sh"
t=$(topic)
n=$(grep -c '^> - ' "$KIN_HANDOFF" || true)
verdict=revise
grep -q 'registry docs' "$KIN_HANDOFF" && grep -q 'GET /agents' "$KIN_HANDOFF" && verdict=accept
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Peer-Reviewer reviewed the report on "$t": $n findings; verdict $verdict.

Verdict:
$verdict

Comments:
- the report draws on both the web (registry docs) and the API (lineage endpoints)
- every claim about responsibility is backed by an ancestors record
END
