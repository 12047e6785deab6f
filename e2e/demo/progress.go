package main

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/thinlvm/thinlvm/e2e/cluster"
)

// labelWidth is the room a step's spinner line gives its label.
const labelWidth = 52

// describe is a progress report without its time:
// "building kube-apiserver (2 of 11)".
func describe(p cluster.Progress) string {
	if p.N > 0 && p.Of > 0 {
		return fmt.Sprintf("%s (%d of %d)", p.Step, p.N, p.Of)
	}
	return p.Step
}

// progressLine is what the spinner shows of a report at now: the report
// and how long its step has run, "building kube-apiserver (2 of 11), 3m12s".
func progressLine(p cluster.Progress, now time.Time) string {
	d := max(now.Sub(p.Since), 0)
	return describe(p) + ", " + d.Truncate(time.Second).String()
}

// fit cuts s to n characters, marking the cut with "…".
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
