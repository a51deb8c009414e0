# Shared by the examples' run.sh (sourced, not run). run.sh sets here (its
# own directory, examples/NAME) and home (--home DIR, or empty), sources this
# file, then calls start_kin.
unset KIN_SOCKET KIN_ADDR # act as the operator, not as an agent

tmp=$(mktemp -d)
chmod 711 "$tmp" # agents run as their own uids when kin serve runs as root
serve=
cleanup() {
	[ -z "$serve" ] || { kill "$serve" 2>/dev/null || :; wait "$serve" 2>/dev/null || :; }
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_kin [KIN SERVE FLAGS...]: sets kin to $KIN, else to the kin on PATH
# when there is a home, else to kin built from this repository. Without a
# home it starts `kin serve FLAGS` on a temporary one, stopped when run.sh
# exits: nothing stays running.
start_kin() {
	kin=${KIN:-}
	if [ -z "$kin" ]; then
		kin=$(command -v kin 2>/dev/null || :)
		if [ -z "$home" ] || [ -z "$kin" ]; then
			# kin publishes itself to its agents only when the binary is named kin.
			(cd "$here/../.." && go build -o "$tmp/kin" ./cmd/kin)
			kin=$tmp/kin
		fi
	fi
	[ -z "$home" ] || return 0
	home=$tmp/home
	"$kin" serve --home "$home" --http off "$@" > "$tmp/serve.log" 2>&1 &
	serve=$!
	i=0
	until "$kin" --home "$home" status > /dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 300 ] || ! kill -0 "$serve" 2>/dev/null; then
			echo "run.sh: kin serve did not start:" >&2
			cat "$tmp/serve.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

# k ARGS...: kin ARGS on the example's home.
k() { "$kin" --home "$home" "$@"; }
