#!/bin/sh
# Mano, the mentor (stage full): hosts the nursery. It creates its two
# children from templates: Spark, the elder (templates/elder: stage full,
# its memory/ open to Nova), and Nova, the newborn (templates/newborn: stage
# restricted, asking to read Mano and Spark). Once Nova has tried its reads
# and Spark its own, Mano moves Nova through the stages, restricted →
# supervised → full, and Nova reports at each what kin lets it use.
. "$(dirname "$0")/lib.sh"
spark=$(born Spark elder elder.sh "share memory/, keep the rest to yourself")
nova=$(born Nova newborn newborn.sh "ask before you act")

# Nova says "born" once it has tried its reads (Spark is live till then);
# then Spark tries to read Nova.
next_message
[ "$msg" = born ] || { echo "$me: Nova said \"$msg\", not born" >&2; exit 1; }
kin send Spark "Nova is here" > /dev/null
collect "$spark" "$KIN_SESSION/spark.md"

for stage in restricted supervised full; do
	if [ "$stage" != restricted ]; then # Nova was born restricted
		kin promote "$nova" --stage "$stage" > /dev/null
		echo "$me: promoted Nova to $stage"
	fi
	kin send Nova "stage $stage" > /dev/null
	next_message
	[ "$msg" = "learned $stage" ] || { echo "$me: Nova said \"$msg\", not learned $stage" >&2; exit 1; }
done
collect "$nova" "$KIN_SESSION/nova.md"

cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Mano created Spark (agent $spark) and Nova (agent $nova) from templates, and promoted
Nova from restricted to supervised to full, its tools changing at each stage.

Nova:
$(quote "$KIN_SESSION/nova.md")

Spark:
$(quote "$KIN_SESSION/spark.md")
END
