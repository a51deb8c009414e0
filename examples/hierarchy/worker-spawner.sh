#!/bin/sh
# Worker-1 (L4, generation 3): tries to spawn a helper of its own. A Worker
# never spawns: kin refuses it (spawn_depth_exceeded, as seed 002 says).
. "$(dirname "$0")/lib.sh"
if out=$(kin spawn --name Helper --role Worker -- true 2>&1); then
	echo "$me: my spawn was allowed: $out" >&2
	exit 1
fi
echo "$me: my spawn was refused: $out"
go_ahead
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Worker-1 did its task itself: its spawn was refused.

Refused:
$out
END
