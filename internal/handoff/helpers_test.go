package handoff_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kin-agents/kin/internal/handoff"
	"github.com/kin-agents/kin/kin"
)

// seed reads a file of seed 001's example from testdata/seed001.
func seed(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "seed001", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeTree creates files under dir; a value starting with "->" makes a
// symlink to the rest, a key ending in "/" a directory.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustContract(t testing.TB, data string) handoff.Contract {
	t.Helper()
	c, err := handoff.ParseContract([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// codes lists a report's violation codes in order.
func codes(r handoff.Report) []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Code)
	}
	return out
}

// wantInvalid fails unless err is a kin "invalid" error whose message holds
// every one of wants.
func wantInvalid(t testing.TB, err error, wants ...string) {
	t.Helper()
	var ke *kin.Error
	if !errors.As(err, &ke) || ke.Code != kin.ECodeInvalid {
		t.Fatalf("error %v (%T) is not a kin invalid error", err, err)
	}
	for _, w := range wants {
		if !strings.Contains(ke.Message, w) {
			t.Errorf("error %q does not mention %q", ke.Message, w)
		}
	}
}

func sameCodes(got, want []string) bool {
	return slices.Equal(got, want) || (len(got) == 0 && len(want) == 0)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// errorsUnwrap returns the innermost error of a chain.
func errorsUnwrap(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
