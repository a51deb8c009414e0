#!/bin/sh
# Spark, the elder: Mano created it from templates/elder, at stage full,
# consenting to Nova reading its memory/, and asking to read nobody. When
# Mano says Nova is here, Spark tries to read Nova's SOUL.md: Nova
# consents, but Spark never asked (it has no visibility.read_from), so kin
# refuses.
. "$(dirname "$0")/lib.sh"
next_message
echo "$me: $msg"
try_read Nova:SOUL.md > "$KIN_SESSION/reads.txt"
cat "$KIN_SESSION/reads.txt"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Spark shares memory/ with Nova, and asked to read nobody.

Reads:
$(cat "$KIN_SESSION/reads.txt")
END
