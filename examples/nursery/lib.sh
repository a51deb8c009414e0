# Shared by the nursery's agents (sourced, not run): examples/lib/kin-agent.sh
# (here, me, collect, quote) and these.
. "$(dirname "$0")/../lib/kin-agent.sh"

# born NAME TEMPLATE SCRIPT LESSON: spawns NAME as this agent's child,
# running SCRIPT beside this agent's, with its workspace provisioned from
# templates/TEMPLATE and {LESSON} filled in; its role, stage and consent
# come from the template's .kin.json. Prints its id.
born() {
	out=$(kin spawn --name "$1" --template "$here/templates/$2" --set LESSON="$4" -- "$here/$3") ||
		{ echo "$me: creating $1 failed" >&2; return 1; }
	id=$(echo "$out" | awk '$1 == "ID" { print $2 }')
	[ -n "$id" ] || { echo "$me: no id for $1 in: $out" >&2; return 1; }
	echo "$me: created $1 (agent $id) from templates/$2" >&2
	echo "$id"
}

# next_message: waits for the next message sent to this agent (kin send),
# after the one numbered $since; sets msg to its text and since to its
# number. kin inbox prints "#SEQ from A to B [SESSION] TEXT".
since=0
next_message() {
	line=$(kin inbox --follow --max 1 --since "$since")
	since=${line%% *}
	since=${since#\#}
	msg=${line#*] }
}

# try_read OWNER:PATH: reads another agent's workspace file with kin read
# and prints what came of it: the file, quoted, or kin's refusal.
try_read() {
	if out=$(kin read "$1" 2>&1); then
		echo "$1: read"
		echo "$out" | sed 's/^/> /'
	else
		echo "$1: refused: $out"
	fi
}

# workspace is this agent's workspace, which its template provisioned: kin
# names no variable for it, but keeps it beside the agent's sessions.
workspace=${KIN_SESSION:+$KIN_SESSION/../../workspace}
