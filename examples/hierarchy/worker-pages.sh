#!/bin/sh
# Worker-2 and Worker-3 (L4, generation 3): process pages 1 to 6, reporting
# each one as the cursor of a heartbeat. Worker-2's first run crashes after
# page 3; its replacement finds "page=3" in KIN_RESUME_CURSOR and resumes at
# page 4.
. "$(dirname "$0")/lib.sh"
first=1
if [ -n "${KIN_RESUME_CURSOR:-}" ]; then
	echo "$me: replacement: KIN_RESUME_CURSOR=$KIN_RESUME_CURSOR"
	first=$((${KIN_RESUME_CURSOR#page=} + 1))
else
	go_ahead
fi
done_pages=
p=$first
while [ "$p" -le 6 ]; do
	done_pages="$done_pages $p"
	kin heartbeat --cursor "page=$p" > /dev/null
	echo "$me: page $p"
	if [ "$me" = Worker-2 ] && [ -z "${KIN_RESUME_CURSOR:-}" ] && [ "$p" -eq 3 ]; then
		echo "$me: crashing after page 3"
		exit 1
	fi
	p=$((p + 1))
done
cat > "$KIN_OUTPUT/result.md" <<END
Summary:
$me processed pages$done_pages${KIN_RESUME_CURSOR:+, resuming after cursor $KIN_RESUME_CURSOR}.
END
