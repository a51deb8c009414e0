# Shared by the research team's agents (sourced, not run):
# examples/lib/kin-agent.sh (here, me, child, collect, quote) and these.
. "$(dirname "$0")/../lib/kin-agent.sh"

# handoff NAME ROLE SCRIPT: spawns NAME as this agent's child, with the task
# read from stdin as its handoff.md and contracts/ROLE.json as its output
# contract; prints the child's id.
handoff() { child "$1" "$2" "$3" --handoff - --contract "$here/contracts/$2.json"; }

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

# topic: the first line after "Topic:" in this agent's handoff.
topic() { sed -n 's/^Topic: //p' "$KIN_HANDOFF" | head -1; }
