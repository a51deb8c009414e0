package kin

import (
	"context"
	"time"
)

// FleetService is what kin knows of the hosts that share its store (seed
// 002's fleet: one kin serve per host, every host's daemon on one
// PostgreSQL). A daemon on its own store is a fleet of one.
type FleetService interface {
	// Hosts lists every host that ever joined the fleet, by name, with its
	// lease and how many live agents it runs.
	Hosts(ctx context.Context) ([]Host, error)
}

// Host is one kin serve of the fleet, named by --host-name (the machine's
// host name by default).
type Host struct {
	Name string `json:"name"`
	// Live is true while the host's lease has not expired: its daemon
	// renewed it within the lease's length.
	Live bool `json:"live"`
	// Self is true for the host that answered.
	Self bool `json:"self,omitempty"`
	// Address is its HTTP API's address as it listens ("" when off).
	Address     string    `json:"address,omitempty"`
	Containment string    `json:"containment,omitempty"`
	Version     string    `json:"version,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	RenewedAt   time.Time `json:"renewed_at"`
	// LeaseUntil is when the lease ends unless renewed; zero after a
	// clean stop released it.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Agents is how many live agents the host runs or registered.
	Agents int `json:"agents"`
}

// MaxHostNameLen is the longest host name accepted: a DNS label's.
const MaxHostNameLen = 63

// ValidateHostName checks a fleet host's name: 1..63 characters from
// [A-Za-z0-9], '-', '_' and '.', starting and ending with a letter or
// digit (a machine's host name, or a DNS label, passes).
func ValidateHostName(s string) error {
	switch {
	case s == "":
		return Errorf(ECodeInvalid, "host name is empty: give --host-name NAME")
	case len(s) > MaxHostNameLen:
		return Errorf(ECodeInvalid, "host name %.20q... is %d characters; at most %d", s, len(s), MaxHostNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(s)-1 || c != '-' && c != '_' && c != '.') {
			return Errorf(ECodeInvalid, "host name %q: use letters, digits, '-', '_' and '.', starting and ending with a letter or digit", s)
		}
	}
	return nil
}
