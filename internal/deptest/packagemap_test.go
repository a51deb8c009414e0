package deptest_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/deptest"
)

const mod = "github.com/kin-agents/kin/"

// testOnly are the packages only tests may import: helpers that start
// daemons, make users, or carry a test binary's init.
var testOnly = map[string]string{
	"internal/kintest":         "test helpers (its init makes a test binary the sandbox shim)",
	"internal/proctest":        "test helpers",
	"internal/pgtest":          "test helpers (a throw-away PostgreSQL server)",
	"internal/modelsdktest":    "test helpers (the official model SDKs, run by Node)",
	"internal/exampletest":     "the examples' end-to-end tests",
	"internal/fleettest":       "test helpers (a fleet of kin serve hosts in network namespaces on one PostgreSQL)",
	"internal/readmetest":      "the README's test",
	"internal/containmenttest": "issue 18's end-to-end tests",
	"internal/store/storetest": "the drivers' test suite",
	"internal/deptest":         "the dependency checker",
	"integrations":             "the integrations' tests",
}

// Reasons used by several rows.
const (
	whyNoStore      = "the store is the daemon's: this package reaches kin's state only through a kin.Service (imports flow cmd -> cli -> client | daemon -> internals -> kin)"
	whyNoSupervisor = "processes are the daemon's, started and stopped by its supervisor; this package asks through a kin.Service"
	whyNoExec       = "it decides from what it is given: starting a process is the supervisor's"
	whyNoNet        = "it decides from what it is given: the network is the daemon's and the SDK's"
	whyNoDriver     = "a service works on store.Store; the composition root opens the driver (storeopen), so that a second driver changes no service"
	whyDown         = "imports point down (daemon -> runner -> registry -> authority, personserver -> store -> kin): what this service needs of one above it is handed in as an interface"
)

// driverBans are the store's drivers, which only storeopen may import.
var driverBans = map[string]string{
	mod + "internal/store/sqlite":   whyNoDriver,
	mod + "internal/store/postgres": whyNoDriver,
	mod + "internal/store/sqlstore": whyNoDriver,
	"modernc.org/...":               whyNoDriver,
	"github.com/jackc/pgx/...":      whyNoDriver,
}

// withBans is m with the driver bans added.
func withBans(m map[string]string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, driverBans)
	return out
}

// packageMap is docs/ARCHITECTURE.md's package map: one row per package,
// its "must never" turned into bans. Rules for every package (the
// test-only packages, internal/daemon, internal/cli) are added by
// checkerFor.
var packageMap = map[string]deptest.DepChecker{
	"kin": {
		OnlyDeps: map[string]string{"std": "everything imports kin, so kin imports only the standard library"},
	},
	"client": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "the SDK is kin.Service over HTTP; " + whyNoStore,
			mod + "internal/supervisor/...": "the SDK is kin.Service over HTTP; " + whyNoSupervisor,
		},
	},
	"cmd/kin": {
		OnlyDeps: map[string]string{
			"std":                "main only handles signals",
			mod + "internal/cli": "main hands its arguments to cli.Run, which holds the logic",
		},
		Skip: map[string]string{mod + "internal/cli": "what the CLI imports is the CLI's row"},
	},
	"internal/cli": {
		Skip: map[string]string{mod + "internal/daemon": "the CLI imports the daemon only for kin serve; what the daemon imports is its row"},
		BadDeps: map[string]string{
			mod + "internal/supervisor/...": "the CLI holds a kin.Service; " + whyNoSupervisor,
			mod + "internal/dashboard":      "the CLI holds a kin.Service; the dashboard is served by the daemon",
		},
	},
	"internal/daemon": {
		BadDeps: map[string]string{
			mod + "client":       "the daemon implements kin.Service itself; the SDK is its callers' (cli -> client | daemon)",
			mod + "internal/top": "kin top is a client of the daemon, started by the CLI",
		},
		BadImports: map[string]string{
			mod + "internal/store/sqlite": "the composition root opens its store by DSN through storeopen, never a driver itself",
		},
	},
	"internal/runner": {
		BadDeps: withBans(map[string]string{
			mod + "internal/exchange": "the exchange is beside the runner, not below it; " + whyDown,
			mod + "client":            "the runner is inside the daemon; the SDK is its callers'",
			mod + "internal/httpapi":  "the API agents reach on their sockets is handed in as an http.Handler",
		}),
	},
	"internal/registry": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":         "what the registry needs of the runner comes through registry.Runner; " + whyDown,
			mod + "internal/exchange":       whyDown,
			mod + "internal/supervisor/...": "the registry never runs a process: the runner does",
		}),
		BadImports: map[string]string{
			"os/exec": "the registry never runs a process: the runner does",
		},
	},
	"internal/authority": {
		BadDeps: withBans(map[string]string{
			mod + "internal/registry":       "the authority is below the registry, which calls Admit inside its transaction; " + whyDown,
			mod + "internal/runner":         "the stop of an exhausted subtree is handed in (authority.Config.Stop); " + whyDown,
			mod + "internal/exchange":       whyDown,
			mod + "internal/personserver":   whyDown,
			mod + "internal/governor":       "the governor's rules are the registry's; the authority decides permissions (package policy)",
			mod + "internal/supervisor/...": "the authority starts and stops no process",
		}),
		BadImports: map[string]string{
			"os/exec": "the authority starts and stops no process (it hands the sandbox shim descriptors, which package sandbox execs)",
		},
	},
	"internal/personserver": {
		BadDeps: withBans(map[string]string{
			mod + "internal/registry":       whyDown,
			mod + "internal/runner":         "where an agent's key file is, is handed in (personserver.Config.KeyPath); " + whyDown,
			mod + "internal/authority":      whyDown,
			mod + "internal/exchange":       whyDown,
			mod + "internal/supervisor/...": "identity starts and stops no process",
		}),
	},
	"internal/exchange": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":         "the agent filesystem and workspaces are handed in (exchange.Config); " + whyDown,
			mod + "internal/supervisor/...": "sharing starts and stops no process",
		}),
	},
	"internal/gateway": {
		BadDeps: withBans(map[string]string{
			mod + "internal/registry":       "the gateway asks only the authority, handed in as gateway.Authority; " + whyDown,
			mod + "internal/runner":         "whether an agent runs here is handed in (gateway.Config.Runs); " + whyDown,
			mod + "internal/exchange":       whyDown,
			mod + "internal/personserver":   whyDown,
			mod + "internal/httpapi":        "kin's own API is handed in as the http.Handler the gateway stands in front of",
			mod + "internal/supervisor/...": "the gateway starts and stops no process",
		}),
		BadImports: map[string]string{
			"os/exec": "the gateway starts no process",
		},
	},
	"internal/logsigner": {
		BadDeps: withBans(map[string]string{
			mod + "internal/registry":       "who may ask for an ancestry proof is handed in (logsigner.Config.Ancestors); " + whyDown,
			mod + "internal/runner":         whyDown,
			mod + "internal/supervisor/...": "the log signer starts and stops no process",
		}),
	},
	"internal/telemetry": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":         "what the metrics read of the runner comes through telemetry.Source; " + whyDown,
			mod + "internal/supervisor/...": "telemetry reads the containment through telemetry.Source",
		}),
		BadImports: map[string]string{
			mod + "internal/authority": "telemetry counts what the services did and decides nothing (it imports the registry only for the Observer's types)",
			mod + "internal/policy":    "telemetry counts what the services did and decides nothing",
		},
	},
	"internal/agentsock": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":         whyDown,
			mod + "internal/registry":       "the socket server decides nothing: the handler it is given does",
			mod + "internal/authority":      "the socket server decides nothing: the handler it is given does",
			mod + "internal/supervisor/...": "which agent a process is comes through agentsock.Peers",
		}),
	},
	"internal/caller": {
		OnlyDeps: map[string]string{
			"std":       "who sent a request needs nothing else",
			mod + "kin": "the domain words",
		},
	},
	"internal/lineage": {
		OnlyDeps: map[string]string{
			"std":       "a family tree in memory needs nothing else",
			mod + "kin": "agent ids",
		},
	},
	"internal/governor": {
		OnlyDeps: map[string]string{
			"std":       "pure decisions need nothing else",
			mod + "kin": "the domain words it decides over",
		},
		BadDeps: map[string]string{
			"os/exec":  whyNoExec,
			"net":      whyNoNet,
			"net/http": whyNoNet,
		},
	},
	"internal/store": {
		BadDeps: map[string]string{
			mod + "internal/store/sqlite": "the store package is the interface every driver implements; a driver is its own package",
			"modernc.org/...":             "the SQLite engine belongs to internal/store/sqlite, not to the interface",
			"database/sql":                "SQL is a driver's: the interface speaks kin's types and the store's sentinels",
		},
	},
	"internal/store/sqlite": {
		BadDeps: map[string]string{
			mod + "internal/governor": "the driver keeps what the daemon decided; deciding is the governor's",
			mod + "internal/policy":   "the driver keeps what the daemon decided; permissions are policy's",
		},
	},
	"internal/hosts": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":   "a host's lease knows nothing of processes: the daemon decides what losing it means",
			mod + "internal/registry": whyDown,
		}),
	},
	"internal/peer": {
		BadDeps: withBans(map[string]string{
			mod + "internal/runner":   "it carries a request the runner decided to make; " + whyDown,
			mod + "internal/registry": "it decides no access: the asking host checked its caller; " + whyDown,
			mod + "client":            "the daemon's side of a host-to-host call; the SDK is the daemon's callers'",
		}),
	},
	"internal/store/postgres": {
		BadDeps: map[string]string{
			mod + "internal/governor":     "the driver keeps what the daemon decided; deciding is the governor's",
			mod + "internal/policy":       "the driver keeps what the daemon decided; permissions are policy's",
			mod + "internal/store/sqlite": "one driver never needs the other: what they share is sqlstore",
			"modernc.org/...":             "the SQLite engine belongs to internal/store/sqlite",
		},
	},
	"internal/store/sqlstore": {
		BadDeps: map[string]string{
			mod + "internal/governor":     "the driver keeps what the daemon decided; deciding is the governor's",
			mod + "internal/policy":       "the driver keeps what the daemon decided; permissions are policy's",
			mod + "internal/store/sqlite": "the shared SQL is below both drivers: each driver imports it, never the reverse",
			"modernc.org/...":             "the shared SQL speaks database/sql; the engine is its driver's",
			"github.com/jackc/pgx/...":    "the shared SQL speaks database/sql; the engine is its driver's",
		},
	},
	"internal/store/storetest": {},
	"internal/store/inmem": {
		BadDeps: withBans(map[string]string{
			"database/sql": "in-memory seams hold no SQL",
		}),
	},
	"internal/store/storeopen": {
		BadDeps: map[string]string{
			mod + "internal/governor": "opening a store decides nothing",
			mod + "internal/policy":   "opening a store decides nothing",
		},
	},
	"internal/httpapi": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "handlers call a kin.Service; " + whyNoStore,
			"database/sql":                  "handlers call a kin.Service; " + whyNoStore,
			"modernc.org/...":               "handlers call a kin.Service; " + whyNoStore,
			mod + "internal/supervisor/...": "handlers call a kin.Service; " + whyNoSupervisor,
		},
	},
	"internal/dashboard": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "the page acts only through /v1/, like the CLI; " + whyNoStore,
			mod + "internal/supervisor/...": "the page acts only through /v1/, like the CLI; " + whyNoSupervisor,
		},
	},
	"internal/top": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "kin top is a client like the CLI; " + whyNoStore,
			mod + "internal/supervisor/...": "kin top is a client like the CLI; " + whyNoSupervisor,
		},
	},
	"internal/mcpserver": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "the tools call the caller's kin.Service, so the daemon's rules decide; " + whyNoStore,
			mod + "internal/supervisor/...": "the tools call the caller's kin.Service; " + whyNoSupervisor,
			mod + "internal/governor":       "the daemon's rules decide, in the daemon, never in the MCP server",
			mod + "internal/identity":       "it authenticates no one: the authentication in front of it puts the Caller in the request's context",
			mod + "internal/httpsig":        "it authenticates no one: the authentication in front of it puts the Caller in the request's context",
			mod + "internal/keyring":        "it authenticates no one and holds no keys",
			mod + "aauth":                   "it authenticates no one: the authentication in front of it puts the Caller in the request's context",
		},
	},
	"internal/agentreq": {
		BadDeps: map[string]string{
			mod + "client":                  "it fills a request with the caller's rights; the caller sends it",
			mod + "internal/httpapi":        "it fills a request with the caller's rights; the caller sends it",
			"net":                           "it fills a request with the caller's rights; the caller sends it",
			"net/http":                      "it fills a request with the caller's rights; the caller sends it",
			mod + "internal/store/...":      "it fills a request; " + whyNoStore,
			mod + "internal/supervisor/...": "it fills a request; " + whyNoSupervisor,
		},
	},
	"internal/treetext": {
		BadDeps: map[string]string{mod + "kin": "it draws any tree as text; what an agent is, is kin's"},
	},
	"internal/exampletest": {},
	"internal/fleettest": {
		BadImports: map[string]string{
			mod + "internal/daemon":    "a fleet is kin serve processes, each in its namespace, driven through the kin binary and the SDK as an operator would",
			mod + "internal/store/...": "the hosts own the store; the fleet gives them its DSN and reads it only through them",
		},
	},
	"integrations":             {},
	"internal/containmenttest": {},
	"internal/readmetest":      {},
	"internal/proctest": {
		OnlyDeps: map[string]string{"std": "every package's own tests may import it, kin's included"},
	},
	"internal/kintest": {},
	"internal/pgtest": {
		BadDeps: map[string]string{
			mod + "internal/store/...": "it runs a server and makes databases; what is stored in them is the drivers'",
		},
	},
	"internal/deptest":      {},
	"internal/modelsdktest": {},
	"internal/fakemodel": {
		BadDeps: map[string]string{
			mod + "...": "a fake provider on the standard library alone (kin's binary carries it for kin dev fake-model): it knows nothing of kin",
		},
	},
	"internal/supervisor": {
		BadDeps: map[string]string{
			mod + "internal/store/...": "the supervisor runs processes; the daemon records them",
		},
	},
	"internal/quota": {
		OnlyDeps: map[string]string{
			"std":                    "counting tokens needs nothing else",
			mod + "kin":              "the quotas and the rate_limited error",
			mod + "internal/caller":  "who sent a request: only agents are limited",
			"golang.org/x/time/rate": "the token bucket (docs/DEPENDENCIES.md)",
		},
	},
	"internal/agentlog": {
		OnlyDeps: map[string]string{
			"std":                   "a pipe, files and renames",
			"golang.org/x/sys/unix": "mkfifo, F_SETPIPE_SZ and splice, which the standard library lacks",
		},
	},
	"internal/ctxfs": {
		OnlyDeps: map[string]string{
			"std":                   "the on-disk ABI is files and system calls",
			mod + "kin":             "the domain words written into the files",
			"golang.org/x/sys/unix": "openat2, renameat2 and O_NOFOLLOW walks the standard library lacks",
		},
		BadDeps: map[string]string{
			mod + "internal/handoff": "whether a result is acceptable is handoff's to decide; ctxfs only copies it",
		},
	},
	"internal/ctxfuse": {
		BadDeps: withBans(map[string]string{
			mod + "internal/store":          "what it serves comes through ctxfuse.Source (the runner's): it never reads the store itself",
			mod + "internal/runner":         "the runner mounts it and answers it through ctxfuse.Source; " + whyDown,
			mod + "internal/supervisor/...": "it serves files; processes are the supervisor's",
			mod + "internal/handoff":        "it serves the control files only",
		}),
	},
	"internal/handoff": {
		OnlyDeps: map[string]string{
			"std":       "parsing and hashing need nothing else",
			mod + "kin": "the domain words",
		},
		BadDeps: map[string]string{
			"os/exec":  "it reads and hashes the files it is given; starting a process is not that",
			"net":      "it reads and hashes the files it is given; the network is not that",
			"net/http": "it reads and hashes the files it is given; the network is not that",
		},
	},
	"internal/policy": {
		OnlyDeps: map[string]string{
			"std":                              "parsing and computing",
			mod + "kin":                        "the domain words (kin.Policy)",
			"sigs.k8s.io/yaml":                 "YAML policies, decoded by encoding/json's strict decoder",
			"go.yaml.in/yaml/v2":               "sigs.k8s.io/yaml's parser",
			"github.com/bmatcuk/doublestar/v4": "the visibility scopes' ** globs",
		},
		BadDeps: map[string]string{
			"os/exec":     "policy is pure: it starts nothing",
			"net":         "policy is pure: it reaches no network",
			"net/http":    "policy is pure: it reaches no network",
			"log":         "policy is pure: decisions are returned, not logged",
			"log/slog":    "policy is pure: decisions are returned, not logged",
			"time/tzdata": "policy is pure: callers pass now, so it needs no time zones",
		},
		// fmt and kin import os, and os imports syscall, io/fs and
		// sync: these hold for policy's own files.
		BadImports: map[string]string{
			"os":      "policy is pure: it parses bytes it is given and does no I/O",
			"syscall": "policy is pure: it makes no system call",
			"io/fs":   "policy is pure: it reads no file system",
			"sync":    "policy is pure: it starts no goroutine and shares no state",
		},
	},
	"internal/sandbox": {}, // what it must never do (run in the daemon, follow a link) is not an import
	"internal/leanshim": {
		BadDeps: map[string]string{
			mod + "internal/sandbox": "it holds the shim's bytes; linking the shim's code would put it in the daemon twice",
		},
	},
	"internal/leanshim/kin-shim": {
		// What makes it lean: the sandbox and the system calls, nothing else.
		OnlyDeps: map[string]string{
			"std":                    "the standard library",
			mod + "internal/sandbox": "the shim itself",
			"golang.org/x/sys/...":   "the system calls the sandbox makes",
		},
	},
	"internal/leanshim/shimsrc": {
		BadDeps: map[string]string{
			mod + "internal/sandbox": "it hashes the shim's source; it runs none of it",
		},
	},
	"internal/template": {
		BadDeps: map[string]string{
			mod + "internal/policy":   "it decides no policy: the config fragment is merged by the CLI and checked by the daemon",
			mod + "internal/governor": "it decides no policy: the config fragment is merged by the CLI and checked by the daemon",
		},
	},
	"internal/httpsig": {
		BadDeps: map[string]string{
			mod + "internal/identity": "it verifies signatures, not JWTs: those are identity's",
		},
		// net/http brings crypto/tls and with it every algorithm.
		BadImports: map[string]string{
			"crypto/rsa":   "Ed25519 is the only algorithm it accepts",
			"crypto/ecdsa": "Ed25519 is the only algorithm it accepts",
			"crypto/hmac":  "Ed25519 is the only algorithm it accepts",
		},
	},
	"internal/identity": {
		OnlyDeps: map[string]string{"std": "AAuth tokens on the standard library, which keeps the algorithms to Ed25519 (docs/DEPENDENCIES.md)"},
		BadDeps: map[string]string{
			"net":      "it serves no HTTP: the daemon and aauth do",
			"net/http": "it serves no HTTP: the daemon and aauth do",
		},
		// crypto's own packages import os (for entropy).
		BadImports: map[string]string{"os": "it holds no keys on disk: keyring does"},
	},
	"internal/auditlog": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "callers hand it events and stored hashes, so the offline checker runs the daemon's code without a store",
			mod + "internal/supervisor/...": "it is the log's pieces, nothing of the running daemon",
		},
	},
	"internal/jsonlist": {
		OnlyDeps: map[string]string{"std": "a parser of JSON arrays of strings, as encoding/json reads them"},
	},
	"internal/keyring": {}, // what it must never do (write elsewhere, follow a link) is not an import
	"aauth": {
		BadDeps: map[string]string{
			mod + "internal/store/...":      "resource servers and agents import aauth; kin's store is not theirs",
			mod + "internal/supervisor/...": "resource servers and agents import aauth; kin's processes are not theirs",
		},
	},
	"internal/uidrange": {
		BadDeps: map[string]string{
			mod + "kin":                     "it hands out uids and knows no agents",
			mod + "internal/store/...":      "it knows nothing of the store: its records are files under a flock",
			mod + "internal/supervisor/...": "it hands out uids; the supervisor runs processes as them",
		},
	},
	"internal/supervisor/cgroup": {},
}

// mayImportDaemon may depend on internal/daemon: it is kin serve.
var mayImportDaemon = map[string]bool{"internal/daemon": true, "cmd/kin": true, "internal/cli": true}

// checkerFor is pkg's row with the rules for every package added.
func checkerFor(pkg string, row deptest.DepChecker) deptest.DepChecker {
	c := row
	c.Package = mod + pkg
	bad := maps.Clone(row.BadDeps)
	if bad == nil {
		bad = map[string]string{}
	}
	if _, ok := testOnly[pkg]; !ok {
		for p, what := range testOnly {
			bad[mod+p] = what + ": only tests may import it"
		}
		bad["testing"] = "testing belongs to tests; code a binary links must not carry it"
		if !mayImportDaemon[pkg] {
			bad[mod+"internal/daemon"] = "only kin serve starts the daemon (cmd/kin, internal/cli); everything else is below it or talks to it through a kin.Service"
		}
		if pkg != "cmd/kin" && pkg != "internal/cli" {
			bad[mod+"internal/cli"] = "imports flow one way, cmd -> cli -> client | daemon -> internals -> kin: only main runs the CLI"
		}
	}
	c.BadDeps = bad
	return c
}

// TestPackageMap enforces the arrows of docs/ARCHITECTURE.md's package
// map, transitively, for every package of the module.
func TestPackageMap(t *testing.T) {
	for _, path := range deptest.Packages(t) {
		pkg := strings.TrimPrefix(path, mod)
		row, ok := packageMap[pkg]
		if !ok {
			if strings.HasPrefix(pkg, "examples/") {
				// Programs a reader runs: only the rules for every
				// package apply.
				row = deptest.DepChecker{}
			} else {
				t.Errorf("%s is not on the package map: add its row to docs/ARCHITECTURE.md and to packageMap", pkg)
				continue
			}
		}
		t.Run(pkg, func(t *testing.T) {
			checkerFor(pkg, row).Check(t)
		})
	}
}

// TestCLIDoesNotImportADriver is separate from TestPackageMap because it
// fails until `kin log verify --db` stops importing internal/store/sqlite
// (the storeseam branch). It checks the CLI's own imports: the binary
// links the driver through the daemon, and through whatever opens a store
// by its DSN.
func TestCLIDoesNotImportADriver(t *testing.T) {
	const why = "cli holds a kin.Service; the offline log check opens the store through store's Open, not a driver"
	deptest.DepChecker{
		Package: mod + "internal/cli",
		BadImports: map[string]string{
			mod + "internal/store/sqlite":   why,
			mod + "internal/store/postgres": why,
			"modernc.org/...":               why,
			"github.com/jackc/pgx/...":      why,
		},
	}.Check(t)
}

// TestPackageMapIsTheDocs keeps packageMap and docs/ARCHITECTURE.md's
// table naming the same packages, so a row added to one is added to the
// other.
func TestPackageMapIsTheDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Package map\n")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Package map\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)`")
	docs := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		docs[strings.TrimSuffix(m[1], "/")] = true
	}
	for _, pkg := range slices.Sorted(maps.Keys(docs)) {
		if _, ok := packageMap[pkg]; !ok {
			t.Errorf("docs/ARCHITECTURE.md's package map has a row for %s; packageMap has none", pkg)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(packageMap)) {
		if !docs[pkg] {
			t.Errorf("packageMap has a row for %s; docs/ARCHITECTURE.md's package map has none", pkg)
		}
	}
}
