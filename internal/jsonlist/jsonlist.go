// Package jsonlist reads a JSON array of strings, as kin stores an agent's
// command: the common case (plain strings, no escapes) without
// encoding/json, whose reflection and copies were the largest part of
// reading a large tree's rows after the rows themselves (issue 22).
package jsonlist

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Parse returns the strings of the JSON array s, exactly as
// encoding/json.Unmarshal into a []string would: an empty array is an
// empty, non-nil slice, null is nil. Where every element is a plain string
// (no escape, no control character, valid UTF-8) and there is no space
// between tokens, the strings are slices of s; anything else goes to
// encoding/json, whose error, if any, is returned.
func Parse(s string) ([]string, error) {
	if out, ok := plain(s); ok {
		return out, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// plain is Parse's fast path: ok is false wherever s is not a compact
// array of plain strings.
func plain(s string) (out []string, ok bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return []string{}, true
	}
	// Separators counted bound the elements of a valid array; an invalid
	// one may hold many, and goes to encoding/json after a few appends.
	out = make([]string, 0, min(strings.Count(body, `","`)+1, 64))
	for {
		if len(body) < 2 || body[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(body[1:], '"')
		if end < 0 {
			return nil, false
		}
		v := body[1 : 1+end]
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c == '\\' {
				return nil, false // an escape, or what JSON refuses
			}
		}
		if !utf8.ValidString(v) {
			return nil, false // encoding/json puts U+FFFD in its place
		}
		out = append(out, v)
		body = body[2+end:]
		if body == "" {
			return out, true
		}
		if body[0] != ',' {
			return nil, false
		}
		body = body[1:]
	}
}
