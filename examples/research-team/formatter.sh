#!/bin/sh
# LaTeX-Formatter (generation 2): typesets the report it was handed as
# artifact/report.tex, and names it in refs.jsonl.
. "$(dirname "$0")/lib.sh"
t=$(topic)
tex=$KIN_OUTPUT/artifact/report.tex
{
	echo '\documentclass{article}'
	echo "\\title{$t}"
	echo '\author{Research-Coordinator, for Dr. Schmidt, COAI Research}'
	echo '\begin{document}'
	echo '\maketitle'
	echo '\begin{itemize}'
	sed -n 's/^- \(.*\)/  \\item \1/p' "$KIN_HANDOFF"
	echo '\end{itemize}'
	echo '\end{document}'
} > "$tex"
printf '{"path":"artifact/report.tex","hash":"sha256:%s","kind":"latex","summary":"the report, typeset"}\n' \
	"$(sha256sum "$tex" | cut -d' ' -f1)" > "$KIN_OUTPUT/refs.jsonl"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
LaTeX-Formatter typeset the report on "$t" as artifact/report.tex ($(grep -c '\\item' "$tex") items, $(wc -l < "$tex") lines).
END
