// Package daemon is `kin serve`, the composition root: Start opens the store
// by its DSN (storeopen), builds each service on it (registry, runner,
// authority, exchange, person server, log signer, with metrics and traces
// observing them), hands each what it needs of the others as an interface or
// a function, and serves them on the operator socket and the HTTP address;
// Close stops them in order. The Daemon embeds the services, so it answers
// kin.Service through them; of its own it keeps only Status, the act-as
// check, MCP over HTTP, the home lock and the operator token.
//
// It must never decide a rule or a permission, run an agent, or keep a fact
// a check decides on: those are the services'.
package daemon
