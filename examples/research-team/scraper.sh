#!/bin/sh
# Web-Scraper (generation 2): "scrapes" the web for its topic. Deterministic:
# no network; the pages are fixed.
. "$(dirname "$0")/lib.sh"
t=$(topic)
echo "$me: scraping the web for: $t"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Web-Scraper found 3 pages on "$t".

Sources:
- web: registry docs, "Agent Lineage": every child records its parent; generation = parent + 1
- web: registry docs, "Haftungsperson Inheritance": children inherit the responsible party
- web: blog, "Capping generation depth": a depth cap keeps every agent tree tractable
END
