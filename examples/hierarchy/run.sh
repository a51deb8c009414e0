#!/bin/sh
# Runs seed 002's hierarchy end to end, with one command:
#
#   examples/hierarchy/run.sh                # on a fresh, temporary kin serve --profile examples/hierarchy/profile.json
#   examples/hierarchy/run.sh --home DIR     # on the kin serve --profile examples/hierarchy/profile.json running on DIR
#
# It spawns GO (Shai is responsible) with task.md as its handoff, waits for
# its checked result, and prints the result, the refusals and replacements
# (kin events) and `kin tree`. Without --home it builds kin (or uses $KIN, a kin
# binary), starts `kin serve` on a temporary home and stops it at the end:
# nothing stays running. Exits 0 when GO's result is completed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
home=
[ "${1:-}" = --home ] && home=$2
. "$here/../lib/kin-example.sh"
start_kin --profile "$here/profile.json"

id=$(k spawn --name GO --responsible Shai --handoff "$here/task.md" -- "$here/go.sh" |
	awk '$1 == "ID" { print $2 }')
echo "spawned GO: agent $id"
status=0
k wait "$id" --timeout 2m || status=$?
echo
k events --type spawn.rejected --type agent.replaced
echo
k tree "$id"
if [ "$status" -ne 0 ]; then
	echo "run.sh: GO's result is not completed (kin wait exit $status); its log:" >&2
	k logs "$id" >&2
fi
exit "$status"
