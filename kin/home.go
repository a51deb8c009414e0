package kin

import (
	"errors"
	"os"
	"path/filepath"
)

// RootHome is kin's home for a daemon run as root without KIN_HOME, and the
// home the CLI looks in when run as root: a system daemon's state belongs
// under /var/lib, and a root daemon runs each agent as a uid of its own,
// which must pass through every directory above the agent filesystem in
// the home; root's ~/.kin lies under /root, which no other user may enter.
const RootHome = "/var/lib/kin/home"

// DefaultHome is kin's home when none is named: $KIN_HOME, else RootHome
// for root, else ~/.kin. The daemon and the clients find each other there.
func DefaultHome() (string, error) {
	if h := os.Getenv("KIN_HOME"); h != "" {
		return h, nil
	}
	if os.Geteuid() == 0 {
		return RootHome, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", errors.New("cannot find kin's home: set KIN_HOME (" + err.Error() + ")")
	}
	return filepath.Join(h, ".kin"), nil
}
