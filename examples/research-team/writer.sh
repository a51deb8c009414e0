#!/bin/sh
# Report-Writer (generation 1): writes the report from the data in its
# handoff, hands it to LaTeX-Formatter to typeset, and returns both: the
# report in result.md and the formatter's report.tex as its own artifact.
. "$(dirname "$0")/lib.sh"
t=$(topic)
findings=$(sed -n 's/^> - \(web\|api\): /- /p' "$KIN_HANDOFF")
fmt=$( { printf 'Topic: %s\n\nTypeset this report as LaTeX, one item a finding:\n\n' "$t"; echo "$findings"; } |
	handoff LaTeX-Formatter formatter formatter.sh)
collect "$fmt" "$KIN_SESSION/formatter.md"
cp "$KIN_SESSION/context/child/LaTeX-Formatter/artifact/report.tex" "$KIN_OUTPUT/artifact/report.tex"
printf '{"path":"artifact/report.tex","hash":"sha256:%s","kind":"latex","summary":"typeset by LaTeX-Formatter"}\n' \
	"$(sha256sum "$KIN_OUTPUT/artifact/report.tex" | cut -d' ' -f1)" > "$KIN_OUTPUT/refs.jsonl"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Report-Writer wrote a report of $(echo "$findings" | wc -l) findings on "$t"; LaTeX-Formatter (agent $fmt) typeset it.

Report:
Lineage makes every agent traceable to a responsible person. The findings:
$findings

Typesetting:
$(section Summary "$KIN_SESSION/formatter.md")
END
echo "$me: done"
