package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"sigs.k8s.io/yaml"

	"github.com/kin-agents/kin/kin"
)

// Limits on what a policy may hold. They keep every check here cheap (the
// pattern comparisons are exponential in the worst case) and every message
// short.
const (
	MaxPolicyBytes = 256 << 10 // a policy or config file
	MaxPatternLen  = 128       // a tool or env pattern
	MaxPathLen     = 4096      // a mount path (PATH_MAX)
	MaxNameLen     = 256       // a visibility name, a role, a scope
	MaxListLen     = 256       // entries of any one list or map
)

// Parse reads a policy file, JSON (input starting with '{') or YAML,
// strictly: unknown keys (compared case-sensitively), repeated keys,
// several YAML documents, null list entries and wrong types are errors
// naming the key; then the policy must pass Validate. Empty lists that
// mean the same as absent ones (tools.deny, visibility's) come back nil.
func Parse(data []byte) (kin.Policy, error) {
	var p kin.Policy
	if err := decodeStrict("policy", data, &p); err != nil {
		return kin.Policy{}, err
	}
	if err := Validate(p); err != nil {
		return kin.Policy{}, err
	}
	canonical(&p)
	return p, nil
}

// canonical turns the empty lists that mean the same as absent ones into
// nil (an empty deny list denies nothing, an empty read_from names no
// one), so that a parsed policy survives a JSON round trip: these fields
// are omitempty. The lists where empty and absent differ (tools.allow,
// mounts, groups, env, spawn.roles) are kept, and are omitzero.
func canonical(p *kin.Policy) {
	if p.Tools != nil && len(p.Tools.Deny) == 0 {
		p.Tools.Deny = nil
	}
	if p.Models != nil && len(p.Models.Deny) == 0 {
		p.Models.Deny = nil
	}
	if v := p.Visibility; v != nil {
		if len(v.ReadFrom) == 0 {
			v.ReadFrom = nil
		}
		if len(v.ReadableTo) == 0 {
			v.ReadableTo = nil
		}
		if len(v.Scope) == 0 {
			v.Scope = nil
		}
	}
}

// decodeStrict decodes YAML or JSON into v, whose type gives the allowed
// keys. encoding/json alone matches keys case-insensitively, says nothing
// about where an unknown key sits, and the YAML converter keeps only the
// first document; so the input is checked first, and the decoded tree is
// walked alongside v's type, naming the path of anything wrong.
func decodeStrict(what string, data []byte, v any) error {
	if len(data) > MaxPolicyBytes {
		return fmt.Errorf("%s is %d bytes; at most %d are allowed", what, len(data), MaxPolicyBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return fmt.Errorf("%s is empty", what)
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	var j []byte
	if trimmed[0] == '{' {
		// JSON is read as JSON: the YAML parser (YAML 1.1) would ignore
		// trailing data and differs on some escapes.
		if err := checkJSON(data); err != nil {
			return fmt.Errorf("%s is not valid JSON (input starting with '{' is read as JSON): %v", what, err)
		}
		j = data
	} else {
		if err := singleDocument(data); err != nil {
			return fmt.Errorf("%s %v", what, err)
		}
		var err error
		j, err = yaml.YAMLToJSONStrict(data) // strict: a repeated key is an error
		if err != nil {
			return fmt.Errorf("%s is not valid YAML: %s", what, firstLines(err.Error(), 3))
		}
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if _, ok := tree.(map[string]any); !ok {
		if tree == nil {
			return fmt.Errorf("%s is empty", what)
		}
		return fmt.Errorf("%s must be a mapping of keys to values, not %s", what, kind(tree))
	}
	if err := checkTree("", tree, reflect.TypeOf(v).Elem()); err != nil {
		return err
	}
	dec = json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %v", what, err) // checkTree should have named it
	}
	return nil
}

// quote quotes a value for a message, cut to a readable length: the value
// may be most of a 256 KiB file.
func quote(s string) string {
	const max = 100
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// firstLines keeps an error short: the YAML parser lists every repeated
// key, which for a crafted 256 KiB input is thousands of lines.
func firstLines(s string, n int) string {
	lines := strings.SplitAfterN(s, "\n", n+1)
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + "..."
}

// checkJSON refuses invalid JSON, a key repeated in an object (which
// encoding/json would let the last one win) and anything after the first
// value.
func checkJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkJSONValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("there is more after the first object")
	}
	return nil
}

// maxDepth bounds nesting; a policy is three levels deep.
const maxDepth = 32

func checkJSONValue(dec *json.Decoder, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string) // the decoder yields only strings as keys
			if seen[key] {
				return fmt.Errorf("the key %s appears twice in one object", quote(key))
			}
			seen[key] = true
			if err := checkJSONValue(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for dec.More() {
			if err := checkJSONValue(dec, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// singleDocument refuses a YAML stream of several documents: a "---" line
// after content, or content after a "..." line. (Document markers at
// column 0 end block scalars too, so a line scan is exact.)
func singleDocument(data []byte) error {
	content, ended := false, false
	for line := range strings.Lines(string(data)) {
		l := strings.TrimRight(line, "\r\n")
		t := strings.TrimSpace(l)
		marker := func(m string) bool {
			return strings.HasPrefix(l, m) && (len(l) == 3 || l[3] == ' ' || l[3] == '\t')
		}
		switch {
		case marker("---"):
			if content || ended {
				return errors.New("has more than one YAML document")
			}
			if strings.TrimSpace(l[3:]) != "" && !strings.HasPrefix(strings.TrimSpace(l[3:]), "#") {
				content = true
			}
		case marker("..."):
			ended = true
		case t == "" || strings.HasPrefix(t, "#"):
		case strings.HasPrefix(t, "%") && !content:
			// a directive
		default:
			if ended {
				return errors.New("has more than one YAML document")
			}
			content = true
		}
	}
	return nil
}

var durationType = reflect.TypeFor[kin.Duration]()

// checkTree walks a decoded JSON tree alongside the Go type it will be
// decoded into, and names the first key the type does not have and the
// first value of the wrong type.
func checkTree(at string, tree any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if tree == nil {
		return nil // null: the field stays absent
	}
	if t == durationType {
		s, ok := tree.(string)
		if !ok {
			return fmt.Errorf("%s: %s is not a duration; write a string like \"90s\" or \"5m\"", at, describeValue(tree))
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%s: %s is not a duration like \"90s\" or \"5m\"", at, quote(s))
		}
		if d < 0 {
			return fmt.Errorf("%s: %s is negative", at, quote(s))
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := tree.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s is not a mapping", at, describeValue(tree))
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				names := slices.Sorted(maps.Keys(fields))
				return fmt.Errorf("%sunknown key %s (allowed: %s)", prefix(at), quote(k), strings.Join(names, ", "))
			}
			if err := checkTree(join(at, k), m[k], f); err != nil {
				return err
			}
		}
	case reflect.Map:
		m, ok := tree.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %s is not a mapping", at, describeValue(tree))
		}
		if len(m) > MaxListLen {
			return fmt.Errorf("%s: %d entries; at most %d are allowed", at, len(m), MaxListLen)
		}
		for _, k := range sortedKeys(m) {
			if m[k] == nil {
				return fmt.Errorf("%s: %s has no value", at, quote(k))
			}
			if err := checkTree(fmt.Sprintf("%s[%s]", at, quote(k)), m[k], t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Slice:
		l, ok := tree.([]any)
		if !ok {
			return fmt.Errorf("%s: %s is not a list", at, describeValue(tree))
		}
		if len(l) > MaxListLen {
			return fmt.Errorf("%s: %d entries; at most %d are allowed", at, len(l), MaxListLen)
		}
		for i, e := range l {
			if e == nil {
				return fmt.Errorf("%s[%d] is null", at, i)
			}
			if err := checkTree(fmt.Sprintf("%s[%d]", at, i), e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := tree.(string); !ok {
			hint := ""
			if _, isBool := tree.(bool); isBool {
				hint = " (YAML reads yes, no, on and off as booleans: quote them)"
			}
			return fmt.Errorf("%s: %s is not a string%s", at, describeValue(tree), hint)
		}
	case reflect.Bool:
		if _, ok := tree.(bool); !ok {
			return fmt.Errorf("%s: %s is not true or false", at, describeValue(tree))
		}
	case reflect.Uint32, reflect.Int64:
		n, ok := tree.(json.Number)
		bitSize, signed := 32, false
		if t.Kind() == reflect.Int64 {
			bitSize, signed = 64, true
		}
		var err error
		if ok && signed {
			_, err = strconv.ParseInt(n.String(), 10, bitSize)
		} else if ok {
			_, err = strconv.ParseUint(n.String(), 10, bitSize)
		}
		if !ok || err != nil {
			return fmt.Errorf("%s: %s is not a whole number from %s", at, describeValue(tree), intRange(bitSize, signed))
		}
	case reflect.Float64:
		n, ok := tree.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %s is not a number", at, describeValue(tree))
		}
		if f, err := n.Float64(); err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("%s: %s is not a finite number", at, n)
		}
	}
	return nil
}

func intRange(bitSize int, signed bool) string {
	if signed {
		return fmt.Sprintf("%d to %d", int64(math.MinInt64), int64(math.MaxInt64))
	}
	return fmt.Sprintf("0 to %d", uint64(1)<<bitSize-1)
}

func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		return "the string " + quote(x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return fmt.Sprintf("the boolean %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%v", v)
}

func prefix(at string) string {
	if at == "" {
		return ""
	}
	return at + ": "
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// jsonFields maps a struct's JSON keys to their field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func kind(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// Validate checks a policy's values; every error names the field and the
// bad value. A valid policy is one kin can enforce as written: in
// particular its mounts never need Landlock to hide a path inside a tree
// it grants.
func Validate(p kin.Policy) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if t := p.Tools; t != nil {
		add(validatePatterns("tools.allow", t.Allow))
		add(validatePatterns("tools.deny", t.Deny))
	}
	if m := p.Models; m != nil {
		add(validatePatterns("models.allow", m.Allow))
		add(validatePatterns("models.deny", m.Deny))
	}
	add(validateMounts(p.Mounts))
	if len(p.Groups) > MaxListLen {
		add(fmt.Errorf("groups: %d entries; at most %d are allowed", len(p.Groups), MaxListLen))
	}
	add(validatePatterns("env", p.Env))
	if s := p.Spawn; s != nil {
		add(validateList("spawn.roles", s.Roles, validRole))
	}
	if b := p.Budget; b != nil {
		add(validateBudget(b))
	}
	if v := p.Visibility; v != nil {
		add(validateList("visibility.read_from", v.ReadFrom, validAgentRef))
		add(validateList("visibility.readable_to", v.ReadableTo, validAgentRef))
		add(validateList("visibility.scope", v.Scope, validScope))
	}
	return errors.Join(errs...)
}

// validatePatterns checks tool or env glob patterns.
func validatePatterns(field string, pats []string) error {
	return validateList(field, pats, validPattern)
}

func validPattern(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > MaxPatternLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(s), MaxPatternLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isWordByte(c) && c != '-' && c != '*' && c != '?' {
			return fmt.Errorf("has %q at byte %d; only letters, digits, '_', '-', '.', ':' and the wildcards '*' and '?' are allowed", c, i)
		}
	}
	return nil
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':'
}

func validRole(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return fmt.Errorf("has %q at byte %d; a role has only letters, digits, '_', '.' and ':'", s[i], i)
		}
	}
	return nil
}

// validAgentRef checks an agent name or id in read_from or readable_to.
func validAgentRef(s string) error {
	if s == "" {
		return errors.New("is empty; name an agent or give its id")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(s), MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("contains %q; an agent name or id has no spaces or control characters", r)
		}
	}
	return nil
}

// validScope checks a visibility scope: a doublestar pattern relative to a
// workspace that cannot climb out of it.
func validScope(s string) error {
	if s == "" {
		return errors.New("is empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("is %d bytes long; at most %d are allowed", len(s), MaxNameLen)
	}
	if err := textOnly(s); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(s, "/"):
		return errors.New("is absolute; a scope is relative to the workspace")
	case hasDotDot(s):
		return errors.New(`has a ".." component`)
	case path.Clean(s) != s:
		return fmt.Errorf("is not clean (write %q)", path.Clean(s))
	case !doublestar.ValidatePattern(s):
		return errors.New("is not a valid glob pattern")
	}
	return nil
}

// textOnly refuses invalid UTF-8 and control characters: such strings would
// not survive a JSON round trip unchanged, and would garble messages.
func textOnly(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("contains the control character %q", r)
		}
	}
	return nil
}

func validateList(field string, items []string, check func(string) error) error {
	if len(items) > MaxListLen {
		return fmt.Errorf("%s: %d entries; at most %d are allowed", field, len(items), MaxListLen)
	}
	for _, s := range items {
		if err := check(s); err != nil {
			return fmt.Errorf("%s: %s %v", field, quote(s), err)
		}
	}
	return nil
}

// validateMounts checks each path and that the set is enforceable by
// Landlock, which grants whole trees and cannot take anything back below a
// granted path: a listed path may be more visible than its nearest listed
// ancestor, never less.
func validateMounts(m map[string]kin.Mode) error {
	if len(m) > MaxListLen {
		return fmt.Errorf("mounts: %d entries; at most %d are allowed", len(m), MaxListLen)
	}
	paths := make([]string, 0, len(m))
	for p := range m {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := validMountPath(p); err != nil {
			return fmt.Errorf("mounts: %v", err)
		}
		if m[p].Rank() < 0 {
			return fmt.Errorf("mounts: %s has the mode %s; a mode is rw, ro or hidden", quote(p), quote(string(m[p])))
		}
	}
	for _, p := range paths {
		var anc string
		for _, q := range paths {
			if q != p && under(p, q) && len(q) > len(anc) {
				anc = q
			}
		}
		if anc == "" || m[p].Rank() >= m[anc].Rank() {
			continue
		}
		if m[p] == kin.ModeHidden {
			return fmt.Errorf("mounts: %q is hidden inside %q (%s): Landlock grants whole trees and cannot hide a path inside a visible one; list the siblings of %q that should stay visible instead of %q",
				p, anc, m[anc], p, anc)
		}
		return fmt.Errorf("mounts: %q is %s inside %q (%s): Landlock grants whole trees and cannot make a path inside a granted one less visible; list the siblings of %q with %q's mode instead of %q",
			p, m[p], anc, m[anc], p, anc, anc)
	}
	return nil
}

func validMountPath(p string) error {
	if len(p) > MaxPathLen {
		return fmt.Errorf("%s: a path of %d bytes is longer than %d", quote(p), len(p), MaxPathLen)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%s contains a NUL byte", quote(p))
	}
	if err := textOnly(p); err != nil {
		return fmt.Errorf("%s %v", quote(p), err)
	}
	return checkPath(p)
}

// Bounds of the subtree limits: cpu.max takes a quota of at least 1 ms
// per 100 ms period (0.01 cores), and no host has more than 4,096 cores.
const (
	MinMemory = 1 << 20
	MinCPU    = 0.01
	MaxCPU    = 4096
)

func validateBudget(b *kin.Budget) error {
	ints := []struct {
		name string
		v    *int64
	}{
		{"budget.max_descendants", b.MaxDescendants},
		{"budget.max_tokens", b.MaxTokens},
		{"budget.cpu_seconds", b.CPUSeconds},
		{"budget.memory_bytes", b.MemoryBytes},
		{"budget.open_files", b.OpenFiles},
	}
	for _, f := range ints {
		if f.v != nil && *f.v < 0 {
			return fmt.Errorf("%s: %d is negative", f.name, *f.v)
		}
	}
	if b.Pids != nil && *b.Pids < 1 {
		return fmt.Errorf("budget.pids: %d is below 1 (the agent's own process counts)", *b.Pids)
	}
	if b.Memory != nil && *b.Memory < MinMemory {
		return fmt.Errorf("budget.memory: %d bytes is below %d (1 MiB): no process starts in less", *b.Memory, MinMemory)
	}
	if b.CPU != nil && !(*b.CPU >= MinCPU && *b.CPU <= MaxCPU) {
		return fmt.Errorf("budget.cpu: %v cores is not between %v and %v", *b.CPU, MinCPU, MaxCPU)
	}
	if b.MaxCost != nil && (*b.MaxCost < 0 || math.IsNaN(*b.MaxCost) || math.IsInf(*b.MaxCost, 0)) {
		return fmt.Errorf("budget.max_cost: %v is not a finite number >= 0", *b.MaxCost)
	}
	if b.Deadline != nil && *b.Deadline < 0 {
		return fmt.Errorf("budget.deadline: %v is negative", *b.Deadline)
	}
	return nil
}
