# Shared by the research team's agents (sourced, not run). Each agent uses
# only the kin CLI: kin puts itself first on every agent's PATH.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
me=${KIN_AGENT_NAME:-agent}

# handoff NAME ROLE SCRIPT: spawns NAME as this agent's child, with the task
# read from stdin as its handoff.md and contracts/ROLE.json as its output
# contract; prints the child's id.
handoff() {
	out=$(kin spawn --name "$1" --role "$2" --handoff - --contract "$here/contracts/$2.json" -- "$here/$3") ||
		{ echo "$me: spawning $1 failed" >&2; return 1; }
	id=$(echo "$out" | awk '$1 == "ID" { print $2 }')
	[ -n "$id" ] || { echo "$me: no id for $1 in: $out" >&2; return 1; }
	echo "$me: handed a task to $1 (agent $id)" >&2
	echo "$id"
}

# collect ID FILE: waits for child ID and keeps its result.md in FILE; fails
# unless kin checked the result against the child's contract and found it
# complete (kin wait exits 0).
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

# section NAME FILE: the text of the section "NAME:" (or "# NAME") of a
# result.md, without its heading.
section() {
	awk -v want="$1" '
		/^#+ / || /^[A-Za-z][A-Za-z ]*:$/ {
			t = $0; sub(/^#+ /, "", t); sub(/:$/, "", t)
			on = (t == want); next
		}
		on && NF { print }' "$2"
}

# task: the first line after "Topic:" in this agent's handoff.
topic() { sed -n 's/^Topic: //p' "$KIN_HANDOFF" | head -1; }
