package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
)

// versionInfo is what kin version prints: the binary's own facts, and the
// daemon's store and containment when one answers.
type versionInfo struct {
	Version     string `json:"version"`
	Commit      string `json:"commit"`
	Modified    bool   `json:"modified,omitempty"`
	Go          string `json:"go"`
	Daemon      string `json:"daemon"` // "running" or why none answered
	DaemonVer   string `json:"daemon_version,omitempty"`
	Store       string `json:"store,omitempty"`
	Containment string `json:"containment,omitempty"`
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kin's version, commit and Go version, and the daemon's store and containment",
		Long: `Print the version of this kin binary, the commit it was built from and the
Go version, then the store and containment of the daemon it reaches (as
"kin status" finds it), or that no daemon answers. "kin --version" is the same.`,
		Example: `  kin version
  kin --version
  kin version --json`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return a.printVersion(cmd.Context())
		}),
	}
}

func (a *app) printVersion(ctx context.Context) error {
	v := versionInfo{Version: version(), Commit: "unknown", Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	v.Daemon = "running"
	svc, err := a.service()
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, serr := svc.Status(ctx)
		if serr == nil {
			v.DaemonVer, v.Store, v.Containment = st.Version, st.Store, st.Containment
		}
		err = serr
	}
	if err != nil {
		v.Daemon = "no daemon answers (" + err.Error() + "); start one with kin serve"
	}
	if a.jsonOut {
		return a.printJSON(v)
	}
	commit := v.Commit
	if v.Modified {
		commit += " (modified)"
	}
	w := newTabWriter(a.env.Stdout)
	fmt.Fprintf(w, "kin\t%s\ncommit\t%s\ngo\t%s\n", v.Version, commit, v.Go)
	if v.Store != "" {
		fmt.Fprintf(w, "daemon\t%s\nstore\t%s\ncontainment\t%s\n", v.DaemonVer, v.Store, v.Containment)
	} else {
		fmt.Fprintf(w, "daemon\t%s\n", v.Daemon)
	}
	return w.Flush()
}
