#!/bin/sh
# API-Fetcher (generation 2): "fetches" records from an API for its topic.
# Deterministic: no network; the records are fixed.
. "$(dirname "$0")/lib.sh"
t=$(topic)
echo "$me: fetching API records for: $t"
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
API-Fetcher fetched 3 records on "$t".

Records:
- api: GET /agents/1/lineage -> 7 agents in 3 generations
- api: GET /agents/7/ancestors -> 7, 3, 1: one responsible party at the root
- api: GET /governor -> max_generation_depth 10, max_children 100
END
