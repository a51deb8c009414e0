#!/bin/sh
# Research-Coordinator (generation 0, the root; Dr. Schmidt, COAI Research is
# responsible): hands the data collection to Data-Collector, the report on
# that data to Report-Writer, and the report to Peer-Reviewer, one after the
# other, and merges their results into its own result.md.
. "$(dirname "$0")/lib.sh"
t=$(topic)
echo "$me: research on: $t"

collector=$(printf 'Topic: %s\n\nCollect data on the topic from the web and from the API.\n' "$t" |
	handoff Data-Collector collector collector.sh)
collect "$collector" "$KIN_SESSION/collector.md"

writer=$( { printf 'Topic: %s\n\nWrite a report on the topic from this data, with a LaTeX version:\n\n' "$t"; quote "$KIN_SESSION/collector.md"; } |
	handoff Report-Writer writer writer.sh)
collect "$writer" "$KIN_SESSION/writer.md"

reviewer=$( { printf 'Topic: %s\n\nReview this report; answer accept or revise:\n\n' "$t"; quote "$KIN_SESSION/writer.md"; } |
	handoff Peer-Reviewer reviewer reviewer.sh)
collect "$reviewer" "$KIN_SESSION/reviewer.md"

cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Research on "$t" for Dr. Schmidt, COAI Research, by Data-Collector (agent $collector),
Report-Writer (agent $writer) and Peer-Reviewer (agent $reviewer), with their children.
Verdict of the review: $(section Verdict "$KIN_SESSION/reviewer.md").

Data:
$(quote "$KIN_SESSION/collector.md")

Report:
$(quote "$KIN_SESSION/writer.md")

Review:
$(quote "$KIN_SESSION/reviewer.md")
END
echo "$me: done"
