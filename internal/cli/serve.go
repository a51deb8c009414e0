package cli

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kin-agents/kin/internal/daemon"
	"github.com/kin-agents/kin/internal/governor"
	"github.com/kin-agents/kin/kin"
)

// serveFlags are serve's flag values, "" where not given.
type serveFlags struct {
	home, http, profile, store string
}

func (a *app) serveCommand() *cobra.Command {
	var fl serveFlags
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the kin daemon",
		Long: `Run the kin daemon: the lineage registry and governor every other command
talks to. It runs until interrupted (SIGINT or SIGTERM), then shuts down
cleanly. Logs are JSON lines on stderr.

kin keeps its state in its home directory (--home, else $KIN_HOME, else ~/.kin),
created with mode 0700:

  kin.sock        the operator socket, mode 0600. Whoever can open it is the
                  operator: the kin CLI on this machine talks through it and
                  needs no token.
  operator.token  the operator token, mode 0600, made on first start. HTTP
                  clients send it as "Authorization: Bearer <token>"; the CLI
                  uses it when KIN_ADDR=host:port and KIN_TOKEN=<token> are set.
  kin.db          the SQLite database: agents, events, governor settings
                  (unless --store names another file).
  kin.lock        held while a daemon runs, so that two never share a home.

Configuration: built-in defaults, overridden by KIN_HOME, KIN_HTTP,
KIN_PROFILE and KIN_STORE, overridden by the flags. The HTTP API listens on
` + daemon.DefaultHTTPAddr + ` unless --http says otherwise ("--http off" serves
the socket only). Shipped profiles: ` + strings.Join(governor.ShippedProfiles(), ", ") + `; see
"kin governor show".`,
		Example: `  kin serve
  kin serve --home /var/lib/kin --http off
  kin serve --profile hierarchy --http 127.0.0.1:8080
  KIN_PROFILE=./my-profile.json kin serve --store sqlite:/data/kin.db`,
		Args: cobra.NoArgs,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			fl.home = a.home
			cfg, err := serveConfig(a.env.Getenv, fl)
			if err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewJSONHandler(a.env.Stderr, nil))
			cfg.Version = version()
			ctx := cmd.Context()
			d, err := daemon.Start(ctx, cfg)
			if err != nil {
				return kin.Errorf(kin.ECodeUnavailable, "kin serve cannot start: %v", err)
			}
			info := serveInfo{
				Version:   cfg.Version,
				Home:      cfg.Home,
				Socket:    d.SocketPath(),
				HTTP:      d.HTTPAddr(),
				TokenFile: filepath.Join(cfg.Home, daemon.TokenName),
				Profile:   cfg.Profile,
				Store:     storeDescription(cfg),
			}
			if a.jsonOut {
				err = a.printJSON(info)
			} else {
				_, err = fmt.Fprintln(a.env.Stderr, info.line())
			}
			if err == nil {
				<-ctx.Done()
			}
			if cerr := d.Close(); cerr != nil {
				return fmt.Errorf("kin serve: shutting down: %w", cerr)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&fl.http, "http", "", "TCP `address` of the HTTP API, or \"off\" (default $KIN_HTTP, else "+daemon.DefaultHTTPAddr+")")
	f.StringVar(&fl.profile, "profile", "", "governor profile: a shipped profile's `name` ("+strings.Join(governor.ShippedProfiles(), ", ")+") or a JSON file's path (default $KIN_PROFILE, else default)")
	f.StringVar(&fl.store, "store", "", "store `DSN`: sqlite (<home>/kin.db) or sqlite:PATH (default $KIN_STORE, else sqlite)")
	return cmd
}

// serveConfig builds the daemon's configuration: defaults, then the KIN_*
// environment, then the flags. A bad value is reported with where it came
// from: a usage error for a flag, an invalid error for the environment.
func serveConfig(getenv func(string) string, fl serveFlags) (daemon.Config, error) {
	cfg := daemon.DefaultConfig()
	type setting struct{ value, source string }
	pick := func(def, env, flag, flagValue string) setting {
		if flagValue != "" {
			return setting{flagValue, "--" + flag}
		}
		if v := getenv(env); v != "" {
			return setting{v, env}
		}
		return setting{def, "default"}
	}
	bad := func(s setting, err error) error {
		msg := strings.TrimPrefix(err.Error(), "config: ")
		if strings.HasPrefix(s.source, "--") {
			return usageErrorf("%s %q: %s", s.source, s.value, msg)
		}
		return kin.Errorf(kin.ECodeInvalid, "%s=%q: %s", s.source, s.value, msg)
	}
	home := pick(cfg.Home, "KIN_HOME", "home", fl.home)
	httpAddr := pick(cfg.HTTPAddr, "KIN_HTTP", "http", fl.http)
	profile := pick(cfg.Profile, "KIN_PROFILE", "profile", fl.profile)
	store := pick(cfg.Store, "KIN_STORE", "store", fl.store)
	cfg.Home, cfg.HTTPAddr, cfg.Profile, cfg.Store = home.value, httpAddr.value, profile.value, store.value
	if probe := (daemon.Config{Home: cfg.Home, HTTPAddr: cfg.HTTPAddr}); probe.Validate() != nil {
		return cfg, bad(httpAddr, probe.Validate())
	}
	if probe := (daemon.Config{Home: cfg.Home, Store: cfg.Store}); probe.Validate() != nil {
		return cfg, bad(store, probe.Validate())
	}
	if _, _, err := governor.Load(cfg.Profile); err != nil {
		return cfg, bad(profile, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, kin.Errorf(kin.ECodeInvalid, "%v", err)
	}
	return cfg, nil
}

// storeDescription says where the store is, as the daemon resolves the DSN.
func storeDescription(cfg daemon.Config) string {
	if cfg.Store == "" || cfg.Store == "sqlite" {
		return "sqlite:" + filepath.Join(cfg.Home, "kin.db")
	}
	return cfg.Store
}

// version is the module version kin was built as, or "dev".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// serveInfo is what `kin serve --json` prints once it listens.
type serveInfo struct {
	Version   string `json:"version"`
	Home      string `json:"home"`
	Socket    string `json:"socket"`
	HTTP      string `json:"http,omitempty"`
	TokenFile string `json:"token_file"`
	Profile   string `json:"profile"`
	Store     string `json:"store"`
}

// line is the one readable line serve prints on stderr once it listens.
func (s serveInfo) line() string {
	httpPart := "http://" + s.HTTP
	if s.HTTP == "" {
		httpPart = "no TCP address (--http off)"
	}
	return fmt.Sprintf("kin serve: listening on socket %s (operator access, mode 0600) and %s; operator token for HTTP in %s; profile %s; store %s; Ctrl-C to stop",
		s.Socket, httpPart, s.TokenFile, s.Profile, s.Store)
}
