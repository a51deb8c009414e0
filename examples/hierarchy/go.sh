#!/bin/sh
# GO (L1, generation 0): the singleton root. Hands project MVP1 to its
# project orchestrator PO-MVP1 and waits for it.
. "$(dirname "$0")/lib.sh"
po=$(child PO-MVP1 PO po.sh)
collect "$po" "$KIN_SESSION/po.md"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
GO delegated project MVP1 to PO-MVP1 (agent $po).

PO-MVP1:
$(quote "$KIN_SESSION/po.md")
END
