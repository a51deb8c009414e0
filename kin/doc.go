// Package kin holds the domain words of kin: agents, their lineage, their
// statuses and runtime states, events, errors, and the Service interface that
// both the daemon and the client SDK implement.
//
// It imports only the standard library and must never gain another import
// (internal/deptest's TestPackageMap enforces this): everything else depends
// on it, so it cannot depend on anything.
package kin
