#!/bin/sh
# Nova, the newborn: Mano created it from templates/newborn, at stage
# restricted, asking to read Mano and Spark (and letting Spark read it). It
# shows its workspace as the template made it, tries the cross-workspace
# reads its consent allows and some it does not, and tries to promote
# itself. Then, at each stage Mano moves it to, it asks kin which tools it
# may use (kin authorize) and reports back.
. "$(dirname "$0")/lib.sh"
tools="read write edit exec web_fetch spawn cron"

echo "$me: my SOUL.md:"
cat "$workspace/SOUL.md"
{
	try_read Spark:memory/lessons.md # both consent
	try_read Spark:SOUL.md           # outside Spark's scope
	try_read Mano:memory/plan.md     # Mano does not consent
} > "$KIN_SESSION/reads.txt"
cat "$KIN_SESSION/reads.txt"
if self=$(kin promote "$KIN_AGENT_ID" --stage full 2>&1); then
	echo "$me: I promoted myself: $self" >&2
	exit 1
fi
echo "$me: my own promotion was refused: $self"
kin send "$KIN_PARENT_ID" born > /dev/null

# row COLUMNS...: one line of the tools table.
row() {
	printf '%-11s' "$1"
	shift
	printf ' %-9s' "$@" | sed 's/ *$//'
	echo
}
row stage $tools > "$KIN_SESSION/tools.txt"
for want in restricted supervised full; do
	next_message
	[ "$msg" = "stage $want" ] || { echo "$me: Mano said \"$msg\", not stage $want" >&2; exit 1; }
	stage=$(kin show "$KIN_AGENT_ID" | awk '$1 == "Stage" { print $2 }')
	[ "$stage" = "$want" ] || { echo "$me: kin says my stage is $stage, not $want" >&2; exit 1; }
	answers=
	for t in $tools; do
		if out=$(kin authorize --tool "$t" 2>&1); then
			answers="$answers allowed"
		else
			case $out in
			denied:*) answers="$answers denied" ;;
			*) echo "$me: kin authorize --tool $t: $out" >&2; exit 1 ;;
			esac
		fi
	done
	# $answers unquoted: one column per tool
	row "$stage" $answers >> "$KIN_SESSION/tools.txt"
	echo "$me: at stage $stage: $answers"
	kin send "$KIN_PARENT_ID" "learned $stage" > /dev/null
done

cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Nova grew from restricted to supervised to full; kin answered for its tools at each stage.

Workspace:
$(quote "$workspace/SOUL.md")

Tools:
$(cat "$KIN_SESSION/tools.txt")

Reads:
$(cat "$KIN_SESSION/reads.txt")

Promoting itself:
$self
END
