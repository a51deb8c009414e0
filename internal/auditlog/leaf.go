package auditlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/kin-agents/kin/kin"
)

// AppendLeaf appends the leaf of event e to dst: one line of JSON with its
// members in this order and no spaces,
//
//	{"seq":7,"time":"2026-11-21T15:02:39.123456789Z","type":"agent.child.spawned","agent":2,"parent":1,"data":{"parent":1,"child":2,"generation":1}}
//
// time is RFC 3339 in UTC with as many fraction digits as needed (none for a
// whole second), data is the event's data exactly as stored. The leaf of
// event seq is leaf index seq-1. Everything kin stores about an event is in
// its leaf, so no column can be edited without changing the leaf's hash.
func AppendLeaf(dst []byte, e kin.Event) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendInt(dst, e.Seq, 10)
	dst = append(dst, `,"time":"`...)
	dst = e.Time.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"agent":`...)
	dst = strconv.AppendInt(dst, int64(e.Agent), 10)
	dst = append(dst, `,"parent":`...)
	dst = strconv.AppendInt(dst, int64(e.Parent), 10)
	dst = append(dst, `,"data":`...)
	if len(e.Data) == 0 {
		dst = append(dst, "{}"...)
	} else {
		dst = append(dst, e.Data...)
	}
	return append(dst, '}')
}

// Leaf returns the leaf of e.
func Leaf(e kin.Event) []byte { return AppendLeaf(make([]byte, 0, 160+len(e.Data)), e) }

// HashLeaf hashes the leaf AppendLeaf wrote after a zero byte:
// buf = 0x00 || leaf, the RFC 6962 leaf hash input, hashed without tlog's
// allocation (the tests hold it equal to tlog.RecordHash(leaf)).
func HashLeaf(buf []byte) tlog.Hash { return sha256.Sum256(buf) }

// LeafHash is the RFC 6962 hash of e's leaf.
func LeafHash(e kin.Event) tlog.Hash { return tlog.RecordHash(Leaf(e)) }

// ParseLeaf reads a leaf back into its event. It accepts only the canonical
// form AppendLeaf writes, so that a leaf means one thing to every reader (no
// duplicate or reordered members for two JSON parsers to disagree on).
func ParseLeaf(b []byte) (kin.Event, error) {
	var l struct {
		Seq    int64           `json:"seq"`
		Time   time.Time       `json:"time"`
		Type   string          `json:"type"`
		Agent  kin.AgentID     `json:"agent"`
		Parent kin.AgentID     `json:"parent"`
		Data   json.RawMessage `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return kin.Event{}, fmt.Errorf("not a kin event leaf: %w", err)
	}
	if dec.More() {
		return kin.Event{}, fmt.Errorf("not a kin event leaf: data after the object")
	}
	e := kin.Event{Seq: l.Seq, Time: l.Time.UTC(), Type: l.Type, Agent: l.Agent, Parent: l.Parent, Data: l.Data}
	if !bytes.Equal(AppendLeaf(nil, e), b) {
		return kin.Event{}, fmt.Errorf("not a kin event leaf: not in canonical form (member order, spacing or escapes differ)")
	}
	if e.Seq < 1 {
		return kin.Event{}, fmt.Errorf("not a kin event leaf: seq %d is not positive", e.Seq)
	}
	if len(l.Data) == 0 || l.Data[0] != '{' {
		return kin.Event{}, fmt.Errorf("not a kin event leaf: data is not a JSON object")
	}
	return e, nil
}

// appendString appends s as a JSON string, escaping only what JSON requires;
// invalid UTF-8 becomes U+FFFD, written as itself so that the leaf reads
// back to the same bytes.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
