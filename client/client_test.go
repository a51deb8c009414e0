package client

import (
	"path/filepath"
	"testing"
)

// TestFromEnvOrder: an agent's own socket (KIN_SOCKET) comes first, since
// the daemon knows the caller by it; then KIN_ADDR; then the home's socket.
func TestFromEnvOrder(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		name, socket, addr, home, kinHome string
		want                              string
	}{
		{"agent socket wins", "/run/kin/agent/w.sock", "127.0.0.1:7777", home, "", "socket /run/kin/agent/w.sock"},
		{"then KIN_ADDR", "", "127.0.0.1:7777", home, "", "127.0.0.1:7777"},
		{"then --home", "", "", home, "/elsewhere", "socket " + filepath.Join(home, "kin.sock")},
		{"then KIN_HOME", "", "", "", "/elsewhere", "socket /elsewhere/kin.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KIN_SOCKET", tc.socket)
			t.Setenv("KIN_ADDR", tc.addr)
			t.Setenv("KIN_HOME", tc.kinHome)
			c, err := FromEnv(tc.home)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.where != tc.want {
				t.Errorf("FromEnv reaches %q, want %q", c.where, tc.want)
			}
		})
	}
}
