#!/bin/sh
# Runs seed 002's hierarchy end to end, with one command:
#
#   examples/hierarchy/run.sh                # on a fresh, temporary kin serve --profile hierarchy
#   examples/hierarchy/run.sh --home DIR     # on the kin serve --profile hierarchy running on DIR
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
unset KIN_SOCKET KIN_ADDR # act as the operator, not as an agent

tmp=$(mktemp -d)
serve=
cleanup() {
	[ -z "$serve" ] || { kill "$serve" 2>/dev/null || :; wait "$serve" 2>/dev/null || :; }
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

kin=${KIN:-}
if [ -z "$kin" ]; then
	kin=$(command -v kin 2>/dev/null || :)
	if [ -z "$home" ] || [ -z "$kin" ]; then
		# kin publishes itself to its agents only when the binary is named kin.
		(cd "$here/../.." && go build -o "$tmp/kin" ./cmd/kin)
		kin=$tmp/kin
	fi
fi
chmod 711 "$tmp" # agents run as their own uids when kin serve runs as root

if [ -z "$home" ]; then
	home=$tmp/home
	"$kin" serve --home "$home" --http off --profile hierarchy > "$tmp/serve.log" 2>&1 &
	serve=$!
	i=0
	until "$kin" --home "$home" status > /dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 300 ] || ! kill -0 "$serve" 2>/dev/null; then
			echo "run.sh: kin serve did not start:" >&2
			cat "$tmp/serve.log" >&2
			exit 1
		fi
		sleep 0.1
	done
fi
k() { "$kin" --home "$home" "$@"; }

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
