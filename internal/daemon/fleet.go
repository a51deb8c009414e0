package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/kin-agents/kin/internal/httpapi"
	"github.com/kin-agents/kin/kin"
)

// handoffHandler serves the checked result of a child that runs here to
// the host that runs its parent (httpapi.PathHandoff, a peer route): a
// tar, or the error as every route answers it. A failure once the tar
// has begun aborts the response, so the peer never takes a short one.
func (d *Daemon) handoffHandler(api *httpapi.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := kin.ParseAgentID(r.PathValue("id"))
		if err != nil {
			api.WriteError(w, r, kin.Errorf(kin.ECodeInvalid, "agent id %q: %v", r.PathValue("id"), err))
			return
		}
		root, err := d.Runner.OpenHandoff(r.Context(), id)
		if err != nil {
			api.WriteError(w, r, err)
			return
		}
		if root != nil {
			defer root.Close()
		}
		w.Header().Set("Content-Type", "application/x-tar")
		w.Header().Set("Cache-Control", "no-store")
		if err := d.Runner.WriteHandoff(root, w); err != nil {
			d.log.Warn("handoff across hosts: send a result", "agent", id, "err", err)
			panic(http.ErrAbortHandler)
		}
	})
}

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
