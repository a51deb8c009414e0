// Package logsigner is the verifiable event log's signer (seed 000's
// permanent, auditable record): it keeps the log key (<home>/keys/log), signs
// checkpoints of the tree the store hashes every event into (on a schedule,
// and at shutdown after the last event), and answers kin.LogService:
// checkpoints, inclusion, consistency and ancestry proofs, the exact leaves
// and a whole-log verification.
//
// It must never write an event (the store appends them, in the
// transactions of the services that decide them) or sign a head it did not
// read from the store.
package logsigner
