#!/bin/sh
# Runs seed 000's research team end to end, with one command:
#
#   examples/research-team/run.sh                # on a fresh, temporary kin serve
#   examples/research-team/run.sh --home DIR     # on the kin serve already running on DIR
#
# It spawns Research-Coordinator (Dr. Schmidt, COAI Research is responsible)
# with task.md as its handoff, waits for its checked result, and prints the
# result and `kin tree`. Without --home it builds kin (or uses $KIN, a kin
# binary), starts `kin serve` on a temporary home and stops it at the end:
# nothing stays running. Exits 0 when the coordinator's result is completed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
home=
[ "${1:-}" = --home ] && home=$2
. "$here/../lib/kin-example.sh"
start_kin

id=$(k spawn --name Research-Coordinator --role coordinator --responsible "Dr. Schmidt, COAI Research" \
	--handoff "$here/task.md" --contract "$here/contracts/coordinator.json" -- "$here/coordinator.sh" |
	awk '$1 == "ID" { print $2 }')
echo "spawned Research-Coordinator: agent $id"
status=0
k wait "$id" --timeout 2m || status=$?
echo
k tree "$id"
if [ "$status" -ne 0 ]; then
	echo "run.sh: the coordinator's result is not completed (kin wait exit $status); its log:" >&2
	k logs "$id" >&2
fi
exit "$status"
