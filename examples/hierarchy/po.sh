#!/bin/sh
# PO-MVP1 (L2, generation 1): one per project. Hands the backend to a
# Specialist and waits for it.
. "$(dirname "$0")/lib.sh"
sp=$(child Specialist-backend Specialist specialist.sh)
collect "$sp" "$KIN_SESSION/specialist.md"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
PO-MVP1 had the backend built by Specialist-backend (agent $sp).

Specialist-backend:
$(quote "$KIN_SESSION/specialist.md")
END
