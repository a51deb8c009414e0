// Package telemetry is what kin tells its operators about itself while it
// runs: Prometheus metrics on a registry of their own (counters and
// histograms the services' Observers update, and the store's, the runner's
// and the governor's state read at scrape time through a Source), and
// OpenTelemetry spans of spawns, registrations and restarts placed in their
// tree's trace by the lineage (Tracer; nil when traces are off).
//
// It must never decide or change anything: it counts what the services
// did and reads what they hold.
package telemetry
