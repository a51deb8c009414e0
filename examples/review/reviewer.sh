#!/bin/sh
# Seed 001's child: it reads its task ($KIN_HANDOFF) and its input ref, and
# answers in $KIN_OUTPUT with the seed's result.md, a patch as
# artifact/patch.diff, and refs.jsonl naming both with their sha256. kin
# checks all of it against the contract once this process exits.
set -e
grep -q "Review the mount ABI" "$KIN_HANDOFF"
spec=$(head -1 "$KIN_SESSION/context/refs.jsonl" | sed 's/.*"path":"\([^"]*\)".*/\1/')
sum() { echo "sha256:$(sha256sum "$1" | cut -d' ' -f1)"; }
cp "$SEED/result.md" "$KIN_OUTPUT/result.md"
cp "$SEED/patch.diff" "$KIN_OUTPUT/artifact/patch.diff"
{
	printf '{"path":"%s","hash":"%s","summary":"mount spec reviewed"}\n' "$spec" "$(sum "$spec")"
	printf '{"path":"artifact/patch.diff","hash":"%s","kind":"patch","summary":"suggested patch"}\n' "$(sum "$KIN_OUTPUT/artifact/patch.diff")"
} > "$KIN_OUTPUT/refs.jsonl"
echo '{"role":"assistant","content":"review done"}' >> "$KIN_SESSION/messages.jsonl"
