package policy

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/kin-agents/kin/kin"
)

// CanRead decides seed 003's cross-workspace read: may the reader read rel,
// a path relative to the owner's workspace? Only with consent on both
// sides: the reader's read_from names the owner, the owner's readable_to
// names the reader (each by name or decimal id), and rel is inside a scope
// of each. There is no write counterpart: visibility only ever reads.
//
// rel is refused before any matching when it is empty, absolute, has a NUL
// or a ".." component: doublestar would match "memory/**" against
// "memory/../secrets".
func CanRead(readerName string, readerID kin.AgentID, reader *kin.Visibility,
	ownerName string, ownerID kin.AgentID, owner *kin.Visibility, rel string) kin.Decision {
	deny := func(format string, args ...any) kin.Decision {
		return kin.Decision{Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case rel == "":
		return deny("the path is empty")
	case strings.IndexByte(rel, 0) >= 0:
		return deny("path %s contains a NUL byte", quote(rel))
	case strings.HasPrefix(rel, "/"):
		return deny("path %s is absolute; give it relative to %s's workspace", quote(rel), ownerName)
	case hasDotDot(rel):
		return deny("path %s has a \"..\" component", quote(rel))
	}
	clean := path.Clean(rel)
	if clean == "." {
		return deny("path %s names the workspace itself, not a file in it", quote(rel))
	}
	r, o := who(readerName, readerID), who(ownerName, ownerID)
	if reader == nil || !names(reader.ReadFrom, ownerName, ownerID) {
		return deny("%s does not ask to read from %s (its visibility.read_from does not name it)", r, o)
	}
	if owner == nil || !names(owner.ReadableTo, readerName, readerID) {
		return deny("%s does not consent to be read by %s (its visibility.readable_to does not name it)", o, r)
	}
	rs, ok := scoped(reader.Scope, clean)
	if !ok {
		return deny("%q is outside the scope %s of %s (the reader)", clean, list(reader.Scope), r)
	}
	ows, ok := scoped(owner.Scope, clean)
	if !ok {
		return deny("%q is outside the scope %s of %s (the owner)", clean, list(owner.Scope), o)
	}
	return kin.Decision{Allowed: true, Rule: rs + " " + ows,
		Reason: fmt.Sprintf("%s may read %q of %s: both consent (reader scope %s, owner scope %s)", r, clean, o, rs, ows)}
}

func who(name string, id kin.AgentID) string {
	if name == "" {
		return fmt.Sprintf("agent %d", id)
	}
	return fmt.Sprintf("%s (agent %d)", name, id)
}

// names reports whether refs names the agent, by name or decimal id.
func names(refs []string, name string, id kin.AgentID) bool {
	return slices.ContainsFunc(refs, func(s string) bool {
		return (name != "" && s == name) || (id != 0 && s == id.String())
	})
}

// scoped returns the first scope pattern matching rel.
func scoped(scopes []string, rel string) (string, bool) {
	for _, s := range scopes {
		if ok, err := doublestar.Match(s, rel); err == nil && ok {
			return s, true
		}
	}
	return "", false
}
