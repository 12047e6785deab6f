package main

import "testing"

func TestAdvertiseAddress(t *testing.T) {
	tests := []struct {
		flag, listen, podIP, want string
		fails                     bool
	}{
		{flag: "10.0.2.2:40001", listen: "[::]:9443", want: "10.0.2.2:40001"},
		{listen: "127.0.0.1:41234", podIP: "10.1.2.3", want: "127.0.0.1:41234"},
		{listen: "[::]:9443", podIP: "10.1.2.3", want: "10.1.2.3:9443"},
		{listen: "0.0.0.0:9443", podIP: "fd00::7", want: "[fd00::7]:9443"},
		{listen: "[::]:9443", fails: true},
	}
	for _, tt := range tests {
		got, err := advertiseAddress(tt.flag, tt.listen, tt.podIP)
		if (err != nil) != tt.fails || got != tt.want {
			t.Errorf("advertiseAddress(%q, %q, %q) = %q, %v; want %q (fails %v)", tt.flag, tt.listen, tt.podIP, got, err, tt.want, tt.fails)
		}
	}
}
