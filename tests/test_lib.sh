# test_lib.sh: helpers the shell tests source.

# wait_line PATTERN FILE [TENTHS]: wait until FILE has a line matching
# PATTERN, checking every 0.1 s, at most TENTHS times (default 100);
# returns 1 if it never does.
wait_line() {
	for n in $(seq "${3:-100}"); do grep -q "$1" "$2" && return 0; sleep 0.1; done
	return 1
}
