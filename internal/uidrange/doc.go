// Package uidrange owns the uids a root daemon's agents run as: each
// daemon (each home) gets a range of its own, START:COUNT, and agent id N
// runs as uid and gid START+N. It parses ranges, keeps the host-wide
// allocation file that every kin daemon of the host shares (under a lock),
// records a home's range in the home, and refuses a range that overlaps
// another daemon's or a user, group or subordinate id range of the host's
// /etc files.
//
// It must never hand out a uid twice: two homes with one uid would let an
// agent of one read the other's sessions and keys and signal its
// processes. It knows nothing of agents, the store or the supervisor, and
// it only reads the local /etc files (users that exist only in LDAP or
// another NSS source are not seen).
package uidrange
