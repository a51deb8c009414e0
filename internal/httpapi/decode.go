package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/kin-agents/kin/kin"
)

// MaxBodySize bounds a request body.
const MaxBodySize = 1 << 20

// DecodeJSON reads exactly one JSON object from r into v. Unknown fields,
// trailing data, wrong types and oversized bodies are kin "invalid" errors
// that name the problem.
func DecodeJSON(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxBodySize+1))
	if err != nil {
		return kin.Errorf(kin.ECodeInvalid, "reading the request body: %v", err)
	}
	if len(data) > MaxBodySize {
		return kin.Errorf(kin.ECodeInvalid, "the request body is larger than %d bytes", MaxBodySize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return kin.Errorf(kin.ECodeInvalid, "the request body is empty; a JSON object is expected")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return kin.Errorf(kin.ECodeInvalid, "invalid JSON body: %s", describeJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return kin.Errorf(kin.ECodeInvalid, "invalid JSON body: more than one JSON value")
	}
	return nil
}

func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("syntax error at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if error(typ) != err && typ.Field == "" {
			return err.Error() // a type's own UnmarshalJSON wrapped it with a better explanation
		}
		if typ.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", jsonFieldPath(typ.Field), typ.Type, typ.Value)
		}
		return fmt.Sprintf("expected %s, not %s", typ.Type, typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends too early"
	}
	return err.Error()
}

// jsonFieldPath drops the Go names of embedded structs that encoding/json
// puts in an error's field path ("RegisterRequest.parent" for SpawnRequest's
// parent): the caller only knows the flat JSON names, which in kin are
// never capitalised.
func jsonFieldPath(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && p != "" && unicode.IsUpper(rune(p[0])) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}
