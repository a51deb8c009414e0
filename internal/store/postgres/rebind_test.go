package postgres

import (
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT 1`:                                 `SELECT 1`,
		`WHERE a = ? AND b = ?`:                    `WHERE a = $1 AND b = $2`,
		`SELECT CAST(?1 AS BIGINT), ?2, ?3, ?1`:    `SELECT CAST($1 AS BIGINT), $2, $3, $1`,
		`WHERE s = '?' AND t = ?`:                  `WHERE s = '?' AND t = $1`,
		`WHERE "we?ird" = ? AND x = 'it''s ?'`:     `WHERE "we?ird" = $1 AND x = 'it''s ?'`,
		`a.id IN (SELECT value FROM json_each(?))`: `a.id IN (SELECT value FROM kin_ids($1))`,
		`'unterminated ?`:                          `'unterminated ?`,
		`?`:                                        `$1`,
	} {
		if got := Rebind(in); got != want {
			t.Errorf("Rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRebind: any text rebinds without a panic, keeps everything but the
// placeholders (and json_each's name), and leaves no ? outside quotes.
func FuzzRebind(f *testing.F) {
	for _, s := range []string{"", "?", "??", "?1?2", "'?'", `"?"`, "a = ? AND b = '?'", "json_each(?)", "'", "?99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		got := Rebind(q)
		if !strings.Contains(q, "?") && !strings.Contains(q, "json_each(") && got != q {
			t.Fatalf("Rebind(%q) = %q: changed a query without placeholders", q, got)
		}
		if strings.Count(got, "?") > strings.Count(q, "?") {
			t.Fatalf("Rebind(%q) = %q: more question marks", q, got)
		}
	})
}
