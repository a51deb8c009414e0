# Shared by the examples' agents (sourced, through their lib.sh, not run).
# Each agent uses only the kin CLI: kin puts itself first on every agent's
# PATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
me=${KIN_AGENT_NAME:-agent}

# child NAME ROLE SCRIPT [SPAWN FLAGS...]: spawns NAME as this agent's child,
# running SCRIPT beside this agent's, and prints its id.
child() {
	name=$1 role=$2 script=$3
	shift 3
	out=$(kin spawn --name "$name" --role "$role" "$@" -- "$here/$script") ||
		{ echo "$me: spawning $name failed" >&2; return 1; }
	id=$(echo "$out" | awk '$1 == "ID" { print $2 }')
	[ -n "$id" ] || { echo "$me: no id for $name in: $out" >&2; return 1; }
	echo "$me: spawned $name (agent $id)" >&2
	echo "$id"
}

# collect ID FILE: waits for child ID and keeps its result.md in FILE; fails
# unless kin found its result completed (kin wait exits 0; with an output
# contract, only when the result meets it).
collect() {
	if ! kin wait "$1" > "$2.wait"; then
		echo "$me: child $1 did not complete:" >&2
		cat "$2.wait" >&2
		return 1
	fi
	echo "$me: $(head -1 "$2.wait")" >&2
	kin result "$1" > "$2"
}

# quote FILE: FILE as a quotation, so that its sections stay its own.
quote() { sed 's/^/> /' "$1"; }
