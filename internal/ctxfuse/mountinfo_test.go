package ctxfuse

import (
	"fmt"
	"strings"
	"testing"
)

// escape is mountinfo's escaping of a mount point (the kernel's
// seq_path with " \t\n\\").
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, `\%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b/agent`: "/tmp/a b/agent",
		`/x\134y`:           `/x\y`,
		`/plain`:            "/plain",
		`/bad\04`:           `/bad\04`,
		`/bad\9xx`:          `/bad\9xx`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzUnescape: any line is read without a panic, and what the kernel
// escapes comes back as it was.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"/tmp/kin1/home/ctx/agent", "/a b/c", `\`, `\0`, `\777`, "/x\ty\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		unescape(s)
		if got := unescape(escape(s)); got != s {
			t.Errorf("unescape(escape(%q)) = %q", s, got)
		}
	})
}
