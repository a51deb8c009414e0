package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/kin-agents/kin/kin"
)

// invalidf is the error of every bad input here: kin's "invalid" code, so the
// CLI and the API show the message as it is.
func invalidf(format string, args ...any) error {
	return kin.Errorf(kin.ECodeInvalid, format, args...)
}

// object is one JSON object read strictly. encoding/json alone would accept
// duplicate keys, match keys case-insensitively and (with
// DisallowUnknownFields) still not say which line of a JSONL file was bad, so
// the files of this package are read through it.
type object struct {
	prefix string // what is being read: "contract", "refs.jsonl line 3"
	path   string // where inside it: "", "sections[1]", "limits"
	keys   []string
	vals   map[string]json.RawMessage
}

// decodeObject reads data as exactly one JSON object whose keys are all in
// allowed, each at most once.
func decodeObject(prefix, path string, data []byte, allowed []string) (*object, error) {
	o := &object{prefix: prefix, path: path, vals: map[string]json.RawMessage{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, o.errf("is empty; a JSON object is expected")
	}
	if err != nil {
		return nil, o.errf("is not valid JSON: %s", describeJSONError(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, o.errf("must be a JSON object, not %s", tokenKind(tok))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, o.errf("is not valid JSON: %s", describeJSONError(err))
		}
		key, _ := tok.(string) // the decoder only yields strings in key position
		if _, dup := o.vals[key]; dup {
			return nil, o.errf("has the key %q twice", key)
		}
		if !slices.Contains(allowed, key) {
			msg := fmt.Sprintf("has an unknown key %q (allowed: %s)", key, strings.Join(allowed, ", "))
			for _, a := range allowed {
				if strings.EqualFold(a, key) {
					msg += fmt.Sprintf("; keys are case-sensitive: did you mean %q?", a)
				}
			}
			return nil, o.errf("%s", msg)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, o.errf("is not valid JSON: %s", describeJSONError(err))
		}
		o.keys = append(o.keys, key)
		o.vals[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, o.errf("is not valid JSON: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, o.errf("has data after the JSON object")
	}
	return o, nil
}

// where names the object itself in messages.
func (o *object) where() string {
	if o.path == "" {
		return o.prefix
	}
	return o.prefix + ": " + o.path
}

func (o *object) errf(format string, args ...any) error {
	return invalidf("%s %s", o.where(), fmt.Sprintf(format, args...))
}

// field names a key of the object in messages: "sections[1].name".
func (o *object) field(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

func (o *object) fieldErrf(key, format string, args ...any) error {
	return invalidf("%s: %s %s", o.prefix, o.field(key), fmt.Sprintf(format, args...))
}

func (o *object) has(key string) bool { _, ok := o.vals[key]; return ok }

func (o *object) str(key string) (string, error) {
	raw := o.vals[key]
	if k := rawKind(raw); k != "a string" {
		return "", o.fieldErrf(key, "must be a string, not %s", k)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", o.fieldErrf(key, "is not a valid string: %s", describeJSONError(err))
	}
	return s, nil
}

func (o *object) boolean(key string) (bool, error) {
	switch string(o.vals[key]) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, o.fieldErrf(key, "must be true or false, not %s", rawKind(o.vals[key]))
}

// integer reads a whole number in [lo, hi]; 1.0 and 1e3 are refused so that
// a limit is always written the way it is meant.
func (o *object) integer(key string, lo, hi int64) (int64, error) {
	raw := o.vals[key]
	if k := rawKind(raw); k != "a number" {
		return 0, o.fieldErrf(key, "must be a whole number, not %s", k)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, o.fieldErrf(key, "is %s, outside %d..%d", raw, lo, hi)
		}
		return 0, o.fieldErrf(key, "must be a whole number, not %s", raw)
	}
	if n < lo || n > hi {
		return 0, o.fieldErrf(key, "is %d, outside %d..%d", n, lo, hi)
	}
	return n, nil
}

func (o *object) list(key string) ([]json.RawMessage, error) {
	raw := o.vals[key]
	if k := rawKind(raw); k != "a list" {
		return nil, o.fieldErrf(key, "must be a list, not %s", k)
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, o.fieldErrf(key, "is not a valid list: %s", describeJSONError(err))
	}
	return l, nil
}

// rawKind names the JSON type of an already-valid raw value.
func rawKind(raw json.RawMessage) string {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func tokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "a list"
		}
		return fmt.Sprintf("%q", v.String())
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a number"
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("%v (at byte %d)", syn, syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the JSON ends too early"
	}
	return err.Error()
}
