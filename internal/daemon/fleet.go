package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kin-agents/kin/kin"
)

// Hosts lists the fleet's hosts (kin.FleetService): package hosts answers.
func (d *Daemon) Hosts(ctx context.Context) ([]kin.Host, error) { return d.host.Hosts(ctx) }

// hostName is the host's name in the fleet: HostName, else the machine's.
func (c *Config) hostName() (string, error) {
	if c.HostName != "" {
		return c.HostName, kin.ValidateHostName(c.HostName)
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host name: %w; give kin serve --host-name NAME", err)
	}
	if err := kin.ValidateHostName(name); err != nil {
		return "", fmt.Errorf("the machine's host name %q cannot name a host of the fleet (%v): give kin serve --host-name NAME", name, err)
	}
	return name, nil
}

// logKeyDir is where the log key is kept: LogKeyDir, else the home's.
func (c *Config) logKeyDir() string {
	if c.LogKeyDir != "" {
		return c.LogKeyDir
	}
	return filepath.Join(c.Home, keysDir, "log")
}
