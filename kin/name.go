package kin

import (
	"fmt"
	"strings"
)

// MaxNameLen is the longest agent name accepted. Names become file names in
// the agent filesystem, so they stay well below NAME_MAX.
const MaxNameLen = 64

// Name is an agent name split by seed 002's identity grammar:
//
//	GO           Role only (a singleton)
//	HO@Server1   Role@Host, IO@Shai: Role@Human   (Sep '@')
//	PO-MVP1      Role-Project                     (Sep '-')
//	coder        plain names are roles without a context
//	rev-123      parses as Role "rev", Context "123"; the split only matters
//	             when the profile gives the role a per-context cardinality
//
// The split is the first '@', else the first '-'.
type Name struct {
	Full    string
	Role    string
	Sep     byte // '@', '-' or 0
	Context string
}

// ParseName checks s against the name grammar and splits it.
//
// A name is 1..64 characters from [A-Za-z0-9] and the separators
// '-', '_', '.', ':', '@'; it starts and ends with a letter or digit, has at
// most one '@', and never two separators in a row (so never "..").
// '/' and '+' are excluded: names become file names, and '+' is reserved for
// AAuth sub-agent local parts that kin derives from names.
func ParseName(s string) (Name, error) {
	if s == "" {
		return Name{}, Errorf(ECodeInvalid, "name is empty")
	}
	if len(s) > MaxNameLen {
		return Name{}, Errorf(ECodeInvalid, "name is %d bytes long; at most %d are allowed", len(s), MaxNameLen)
	}
	ats := 0
	prevSep := true // so a leading separator is caught
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c):
			prevSep = false
		case isNameSep(c):
			if prevSep {
				if i == 0 {
					return Name{}, Errorf(ECodeInvalid, "name %q must start with a letter or digit", s)
				}
				return Name{}, Errorf(ECodeInvalid, "name %q has two separators in a row at byte %d", s, i)
			}
			if c == '@' {
				ats++
			}
			prevSep = true
		default:
			return Name{}, Errorf(ECodeInvalid, "name %q has a character that is not allowed at byte %d: %s (allowed: letters, digits, - _ . : @)", s, i, quoteByte(c))
		}
	}
	if prevSep {
		return Name{}, Errorf(ECodeInvalid, "name %q must end with a letter or digit", s)
	}
	if ats > 1 {
		return Name{}, Errorf(ECodeInvalid, "name %q has more than one '@'", s)
	}
	n := Name{Full: s, Role: s}
	if i := strings.IndexByte(s, '@'); i >= 0 {
		n.Role, n.Sep, n.Context = s[:i], '@', s[i+1:]
	} else if i := strings.IndexByte(s, '-'); i >= 0 {
		n.Role, n.Sep, n.Context = s[:i], '-', s[i+1:]
	}
	return n, nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isNameSep(c byte) bool { return c == '-' || c == '_' || c == '.' || c == ':' || c == '@' }

func quoteByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return fmt.Sprintf("%q", string(c))
}
