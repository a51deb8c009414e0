package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// decodeStrict unmarshals a JSON object into v after checking its top-level
// members: no duplicate names, and no name that differs only in case from one
// of known (encoding/json matches field names case-insensitively, which must
// not let "ALG" stand in for "alg"). Unknown members are otherwise allowed.
func decodeStrict(data []byte, v any, known ...string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		if seen[name] {
			return errors.New("duplicate member " + name)
		}
		seen[name] = true
		for _, k := range known {
			if name != k && strings.EqualFold(name, k) {
				return errors.New("member " + name + " differs in case from " + k)
			}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return json.Unmarshal(data, v)
}
