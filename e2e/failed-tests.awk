# failed-tests.awk prints, from a `go test -v` log, each failed test's
# last 40 lines (its messages come before its "--- FAIL" line: -v streams
# them as they are logged) and any panic with what follows it. The lanes
# of `make test-vm` print this at their end when a suite fails.
/^=== (RUN|CONT|NAME) / { n = 0 }
{ buf[n % 40] = $0; n++ }
/^ *--- FAIL/ {
	for (i = (n > 40 ? n - 40 : 0); i < n; i++) print buf[i % 40]
	print ""
	n = 0
}
/^panic: / { panicked = 1 }
panicked { print }
