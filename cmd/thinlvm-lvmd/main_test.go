package main

import (
	"slices"
	"testing"
)

// --lvm-command-prefix is split into words, needs the exec runner, and its
// program must exist.
func TestCommandPrefix(t *testing.T) {
	for _, tc := range []struct {
		flag, runner string
		want         []string
		wantErr      bool
	}{
		{flag: "", runner: "shell"},
		{flag: "  ", runner: "exec"},
		{flag: "sh  -c", runner: "exec", want: []string{"sh", "-c"}},
		{flag: "sh -c", runner: "shell", wantErr: true},
		{flag: "thinlvm-no-such-program --", runner: "exec", wantErr: true},
	} {
		got, err := commandPrefix(tc.flag, tc.runner)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("commandPrefix(%q, %q) = %q, %v; want %q, error %v", tc.flag, tc.runner, got, err, tc.want, tc.wantErr)
		}
	}
}
