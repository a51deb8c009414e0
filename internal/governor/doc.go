// Package governor decides who may register or spawn whom. It is pure: it
// reads a kin.Profile and the facts the daemon gathered inside the write
// transaction, and returns a rule's *kin.Error or nil. It never does I/O
// beyond loading profile files, never reads the clock, and never writes.
package governor
