// Package daemon is `kin serve`: it wires the store, the governor and the
// HTTP API together and implements kin.Service. It owns every goroutine it
// starts (Start/Close) and is the only place that turns store sentinels into
// kin errors for the registry.
package daemon
