# failed-tests.awk prints, from a `go test -v` log, each failed test's
# last 40 lines (its messages come before its "--- FAIL" line: -v streams
# them as they are logged), any panic with what follows it and a
# TestMain's failure (its "FAIL: " line), then a
# summary: each failed test with the first line of its first message
# (a message can be long: a guest's state follows the error). The lanes of
# `make test-vm` print this at their end when a suite fails, and a CI
# page often shows only the summary.
/^=== (RUN|CONT|NAME) / { n = 0; first = "" }
{ buf[n % 40] = $0; n++ }
first == "" && /^ +[A-Za-z0-9_]+\.go:[0-9]+: / { first = $0; sub(/^ +/, "", first) }
/^ *--- FAIL/ {
	for (i = (n > 40 ? n - 40 : 0); i < n; i++) print buf[i % 40]
	print ""
	name = $0; sub(/^ *--- FAIL: /, "", name)
	failed[++nfailed] = name ": " substr(first, 1, 300)
	n = 0; first = ""
}
/^panic: / { panicked = 1; failed[++nfailed] = "panic: " substr($0, 8, 300) }
/^FAIL: / { print; failed[++nfailed] = "TestMain: " substr($0, 7, 300) }
panicked { print }
END {
	if (nfailed == 0) exit
	print "=== summary: the failed tests and their first messages"
	for (i = 1; i <= nfailed; i++) print failed[i]
}
