#!/bin/sh
# Specialist-backend (L3, generation 2): spawns three Workers, the most a
# parent may have live at once under the example's profile; a fourth is
# refused (max_children_exceeded). Worker-2 restarts on failure: it crashes
# once, and kin replaces it, handing the replacement its last cursor.
. "$(dirname "$0")/lib.sh"
w1=$(child Worker-1 Worker worker-spawner.sh)
w2=$(child Worker-2 Worker worker-pages.sh --restart on-failure)
w3=$(child Worker-3 Worker worker-pages.sh)
# All three are live: each waits for this agent's go.
if out=$(kin spawn --name Worker-4 --role Worker -- true 2>&1); then
	echo "$me: Worker-4 was spawned: $out" >&2
	exit 1
fi
echo "$me: Worker-4 refused: $out"
for w in "$w1" "$w2" "$w3"; do kin send "$w" go > /dev/null; done

collect "$w1" "$KIN_SESSION/w1.md"
collect "$w3" "$KIN_SESSION/w3.md"
# Worker-2 crashes: its own result is failed, and kin starts a replacement
# under the same name; wait for that one, for at most 30 s.
if kin wait "$w2" > "$KIN_SESSION/w2-first.wait"; then
	echo "$me: Worker-2 (agent $w2) did not crash" >&2
	exit 1
fi
echo "$me: $(head -1 "$KIN_SESSION/w2-first.wait")"
r=
i=0
while [ -z "$r" ]; do
	r=$(kin children "$KIN_AGENT_ID" | awk -v old="$w2" '$2 == "Worker-2" && $1 != old { print $1 }')
	i=$((i + 1))
	[ -n "$r" ] || [ "$i" -le 300 ] || { echo "$me: no replacement for Worker-2" >&2; exit 1; }
	[ -n "$r" ] || sleep 0.1
done
echo "$me: Worker-2 (agent $w2) was replaced by agent $r"
collect "$r" "$KIN_SESSION/w2.md"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Specialist-backend ran Worker-1 (agent $w1), Worker-2 (agent $w2, replaced by agent $r after a crash)
and Worker-3 (agent $w3); a fourth Worker was refused.

Refused:
Worker-4: $out

Worker-1:
$(quote "$KIN_SESSION/w1.md")

Worker-2:
$(quote "$KIN_SESSION/w2.md")

Worker-3:
$(quote "$KIN_SESSION/w3.md")
END
