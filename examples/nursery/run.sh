#!/bin/sh
# Runs seed 003's nursery end to end, with one command:
#
#   examples/nursery/run.sh                # on a fresh, temporary kin serve
#   examples/nursery/run.sh --home DIR     # on the kin serve already running on DIR
#
# It spawns Mano, the mentor, at stage full (Ada is responsible) with
# task.md as its handoff, waits for its checked result, and prints the
# result (Nova's workspace, its tools at each stage, the reads kin allowed
# and refused), the promotions and tool denials kin recorded (kin events)
# and `kin tree`.
# Without --home it builds kin (or uses $KIN, a kin binary), starts `kin
# serve` on a temporary home and stops it at the end: nothing stays running.
# Exits 0 when Mano's result is completed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
home=
[ "${1:-}" = --home ] && home=$2
. "$here/../lib/kin-example.sh"
start_kin

id=$(k spawn --name Mano --role mentor --responsible Ada --stage full --handoff "$here/task.md" -- "$here/mentor.sh" |
	awk '$1 == "ID" { print $2 }')
echo "spawned Mano: agent $id"
status=0
k wait "$id" --timeout 2m || status=$?
echo
k events --type agent.promoted --type tool.denied
echo
k tree "$id"
if [ "$status" -ne 0 ]; then
	echo "run.sh: Mano's result is not completed (kin wait exit $status); its log:" >&2
	k logs "$id" >&2
fi
exit "$status"
