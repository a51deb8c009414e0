// Package deptest is kin's one dependency checker: a DepChecker names a
// package of the module and what it must not depend on, transitively, each
// ban with its reason, and fails a test with the import chain that brings a
// banned package in. The module's import graph comes from one
// `go list -deps -json ./...` per test binary.
//
// Its own test, TestPackageMap, holds the rules: one row per package of
// docs/ARCHITECTURE.md's package map, so the arrows the map draws hold.
//
// It is for tests only and must never be imported by non-test code
// (TestPackageMap enforces that too).
package deptest
