#!/bin/sh
# Data-Collector (generation 1): hands the web to Web-Scraper and the API to
# API-Fetcher (both run at once), waits for both, and merges their results.
. "$(dirname "$0")/lib.sh"
t=$(topic)
scraper=$(printf 'Topic: %s\n\nScrape the web for pages on the topic; list them under Sources.\n' "$t" |
	handoff Web-Scraper scraper scraper.sh)
fetcher=$(printf 'Topic: %s\n\nFetch API records on the topic; list them under Records.\n' "$t" |
	handoff API-Fetcher fetcher fetcher.sh)
collect "$scraper" "$KIN_SESSION/scraper.md"
collect "$fetcher" "$KIN_SESSION/fetcher.md"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
Data-Collector merged the work of Web-Scraper (agent $scraper) and API-Fetcher (agent $fetcher)
on "$t": $(section Sources "$KIN_SESSION/scraper.md" | wc -l) sources and $(section Records "$KIN_SESSION/fetcher.md" | wc -l) records.

Sources:
$(section Sources "$KIN_SESSION/scraper.md")

Records:
$(section Records "$KIN_SESSION/fetcher.md")
END
echo "$me: done"
