// Package testutil holds what the tests of several packages share and
// that is no fixture of one part: waiting for a condition.
package testutil

import (
	"testing"
	"time"
)

// Timeout is how long Eventually waits: the controllers under test act on
// watch events, which arrive within a second or two; the slack is for a
// loaded machine.
const Timeout = 30 * time.Second

// Eventually waits until cond holds, polling every 50ms, and fails the
// test with what it waited for after Timeout.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
