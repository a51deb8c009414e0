// Package cli is the kin command line: one file per subcommand, each a thin
// layer that parses flags, calls a kin.Service and renders the answer as
// text or JSON.
//
// It holds only a kin.Service (the client SDK, or one a test injects), never
// the daemon's internals, except in `kin serve`, which starts the daemon. It
// must never call os.Exit or keep package-level state: Run builds a fresh
// command tree for every call, so tests run it like a process.
package cli
