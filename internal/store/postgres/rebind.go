package postgres

import (
	"strconv"
	"strings"
)

// Rebind turns a query written for SQLite (package sqlstore's) into
// PostgreSQL's: each `?` placeholder becomes $1, $2, ... in order, and a
// numbered `?N` becomes $N; json_each(?), the shared queries' list of ids,
// becomes kin_ids($n), the set-returning function the schema defines.
// Question marks inside quoted strings and identifiers are left alone.
func Rebind(q string) string {
	q = strings.ReplaceAll(q, "json_each(", "kin_ids(")
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch c {
		case '\'', '"':
			j := i + 1
			for j < len(q) && q[j] != c {
				j++
			}
			if j < len(q) {
				j++ // the closing quote; a doubled quote reopens at once
			}
			b.WriteString(q[i:j])
			i = j - 1
		case '?':
			j := i + 1
			for j < len(q) && q[j] >= '0' && q[j] <= '9' {
				j++
			}
			b.WriteByte('$')
			if j > i+1 {
				b.WriteString(q[i+1 : j])
			} else {
				n++
				b.WriteString(strconv.Itoa(n))
			}
			i = j - 1
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
