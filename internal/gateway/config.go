package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
)

// API is the kind of model API an upstream speaks.
type API string

// The APIs the gateway speaks.
const (
	OpenAI    API = "openai"    // /v1/chat/completions, /v1/responses, /v1/embeddings, /v1/models
	Anthropic API = "anthropic" // /v1/messages, /v1/messages/count_tokens
)

// APIs are the known API kinds, for messages.
var APIs = []API{OpenAI, Anthropic}

// Upstream is one model provider the operator configured: kin serve
// --model-upstream NAME=URL, --model-api NAME=KIND, --model-key NAME=@FILE.
type Upstream struct {
	Name string
	API  API
	// URL is the provider's base, without /v1: the gateway appends the
	// path the agent called (/v1/chat/completions).
	URL *url.URL
	// Key is the operator's key for it, sent as the provider expects
	// (OpenAI: Authorization: Bearer; Anthropic: x-api-key); empty for an
	// upstream that takes none (--model-key NAME=none).
	Key Secret
}

// Secret is a key the daemon holds: it prints as [redacted], in logs and
// in errors; only Reveal gives it, to the request to its upstream.
type Secret struct{ v string }

// NewSecret wraps a key.
func NewSecret(v string) Secret { return Secret{v} }

// Reveal is the key itself.
func (s Secret) Reveal() string { return s.v }

// String never shows the key.
func (s Secret) String() string {
	if s.v == "" {
		return "[none]"
	}
	return "[redacted]"
}

// GoString never shows the key (%#v).
func (s Secret) GoString() string { return s.String() }

// LogValue never shows the key (slog).
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MaxUpstreams bounds how many upstreams one daemon configures.
const MaxUpstreams = 32

// checkName checks an upstream's name: 1 to 32 of a-z, 0-9, '-', '_',
// starting with a letter or a digit.
func checkName(n string) error {
	if n == "" {
		return errors.New("the upstream's NAME is empty")
	}
	if len(n) > 32 {
		return fmt.Errorf("the upstream name %q is longer than 32 bytes", n)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		ok := 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '-' || c == '_')
		if !ok {
			return fmt.Errorf("the upstream name %q has %q at byte %d: use a-z, 0-9, '-' and '_', starting with a letter or a digit", n, c, i)
		}
	}
	return nil
}

func splitSpec(what, spec string) (string, string, error) {
	name, value, ok := strings.Cut(spec, "=")
	if !ok {
		return "", "", fmt.Errorf("%s: %q is not NAME=VALUE", what, clip(spec))
	}
	if err := checkName(name); err != nil {
		return "", "", fmt.Errorf("%s: %w", what, err)
	}
	if value == "" {
		return "", "", fmt.Errorf("%s: %s= has no value", what, name)
	}
	return name, value, nil
}

// clip shortens what a message quotes of a bad value.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// ParseUpstream parses NAME=URL: an http or https URL with a host, no
// query, no fragment and no user info; a trailing /v1 (as providers
// document their base) is dropped, so both forms work.
func ParseUpstream(spec string) (string, *url.URL, error) {
	name, raw, err := splitSpec("model upstream", spec)
	if err != nil {
		return "", nil, err
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("model upstream %s: %q is not a URL: %v", name, clip(raw), err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", nil, fmt.Errorf("model upstream %s: %q is not an http or https URL", name, clip(raw))
	case u.Host == "":
		return "", nil, fmt.Errorf("model upstream %s: %q has no host", name, clip(raw))
	case u.User != nil:
		return "", nil, fmt.Errorf("model upstream %s: the URL holds user information; give the key with --model-key %s=@FILE instead", name, name)
	case u.RawQuery != "" || u.Fragment != "":
		return "", nil, fmt.Errorf("model upstream %s: %q has a query or a fragment", name, clip(raw))
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawPath = ""
	return name, u, nil
}

// ParseAPI parses NAME=KIND, KIND openai or anthropic.
func ParseAPI(spec string) (string, API, error) {
	name, kind, err := splitSpec("model api", spec)
	if err != nil {
		return "", "", err
	}
	if !slices.Contains(APIs, API(kind)) {
		return "", "", fmt.Errorf("model api %s: %q is not openai or anthropic", name, clip(kind))
	}
	return name, API(kind), nil
}

// ParseKey parses NAME=@FILE (the key is the file's content, without
// surrounding white space), NAME=$VAR (the daemon's environment variable
// VAR) or NAME=none (an upstream that takes no key). A key written on the
// command line is refused: command lines are visible to every user of the
// machine (ps).
func ParseKey(spec string, getenv func(string) string, readFile func(string) ([]byte, error)) (string, Secret, error) {
	name, v, err := splitSpec("model key", spec)
	if err != nil {
		return "", Secret{}, err
	}
	switch {
	case v == "none":
		return name, Secret{}, nil
	case strings.HasPrefix(v, "@"):
		path := v[1:]
		if path == "" {
			return "", Secret{}, fmt.Errorf("model key %s: @ names no file", name)
		}
		b, err := readFile(path)
		if err != nil {
			return "", Secret{}, fmt.Errorf("model key %s: %v", name, err)
		}
		key := strings.TrimSpace(string(b))
		if err := checkKey(key); err != nil {
			return "", Secret{}, fmt.Errorf("model key %s: the file %s %v", name, path, err)
		}
		return name, Secret{key}, nil
	case strings.HasPrefix(v, "$"):
		env := v[1:]
		if env == "" || strings.ContainsAny(env, "=$ \t") {
			return "", Secret{}, fmt.Errorf("model key %s: %q is not $VARIABLE", name, clip(v))
		}
		key := strings.TrimSpace(getenv(env))
		if key == "" {
			return "", Secret{}, fmt.Errorf("model key %s: the environment variable %s is not set or empty", name, env)
		}
		if err := checkKey(key); err != nil {
			return "", Secret{}, fmt.Errorf("model key %s: the environment variable %s %v", name, env, err)
		}
		return name, Secret{key}, nil
	}
	return "", Secret{}, fmt.Errorf("model key %s: give the key as %s=@FILE or %s=$VARIABLE (or %s=none): a key on the command line is visible to every user of the machine", name, name, name, name)
}

func checkKey(k string) error {
	if k == "" {
		return errors.New("is empty")
	}
	if len(k) > 4096 {
		return errors.New("holds more than 4096 bytes: not a key")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("holds a space or a character that is not printable ASCII at byte %d: not a key", i)
		}
	}
	return nil
}

// Build makes the upstreams of kin serve's --model-upstream,
// --model-api and --model-key values. An upstream named openai or
// anthropic speaks that API unless --model-api says otherwise; any other
// needs --model-api. Every upstream needs a --model-key (none for one
// that takes no key); a key or an API for an unknown upstream is an error.
func Build(upstreams, apis, keys []string, getenv func(string) string, readFile func(string) ([]byte, error)) ([]Upstream, error) {
	if len(upstreams) > MaxUpstreams {
		return nil, fmt.Errorf("model upstream: %d upstreams; at most %d are allowed", len(upstreams), MaxUpstreams)
	}
	var out []Upstream
	index := map[string]int{}
	for _, s := range upstreams {
		name, u, err := ParseUpstream(s)
		if err != nil {
			return nil, err
		}
		if _, dup := index[name]; dup {
			return nil, fmt.Errorf("model upstream: %s is given twice", name)
		}
		index[name] = len(out)
		up := Upstream{Name: name, URL: u}
		if name == string(OpenAI) || name == string(Anthropic) {
			up.API = API(name)
		}
		out = append(out, up)
	}
	apiSet := map[string]bool{}
	for _, s := range apis {
		name, api, err := ParseAPI(s)
		if err != nil {
			return nil, err
		}
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("model api %s: no --model-upstream is named %s", name, name)
		}
		if apiSet[name] {
			return nil, fmt.Errorf("model api: %s is given twice", name)
		}
		apiSet[name] = true
		out[i].API = api
	}
	keySet := map[string]bool{}
	for _, s := range keys {
		name, key, err := ParseKey(s, getenv, readFile)
		if err != nil {
			return nil, err
		}
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("model key %s: no --model-upstream is named %s", name, name)
		}
		if keySet[name] {
			return nil, fmt.Errorf("model key: %s is given twice", name)
		}
		keySet[name] = true
		out[i].Key = key
	}
	for _, u := range out {
		if u.API == "" {
			return nil, fmt.Errorf("model upstream %s: say which API it speaks with --model-api %s=openai or %s=anthropic", u.Name, u.Name, u.Name)
		}
		if !keySet[u.Name] {
			return nil, fmt.Errorf("model upstream %s: give its key with --model-key %s=@FILE or %s=$VARIABLE (or %s=none if it takes none)", u.Name, u.Name, u.Name, u.Name)
		}
	}
	return out, nil
}

// Check checks upstreams built another way (a test's, the daemon's
// config): names, APIs and URLs.
func Check(ups []Upstream) error {
	if len(ups) > MaxUpstreams {
		return fmt.Errorf("model upstreams: %d; at most %d are allowed", len(ups), MaxUpstreams)
	}
	seen := map[string]bool{}
	for _, u := range ups {
		if err := checkName(u.Name); err != nil {
			return fmt.Errorf("model upstream: %w", err)
		}
		if seen[u.Name] {
			return fmt.Errorf("model upstream: %s is given twice", u.Name)
		}
		seen[u.Name] = true
		if !slices.Contains(APIs, u.API) {
			return fmt.Errorf("model upstream %s: API %q is not openai or anthropic", u.Name, u.API)
		}
		if u.URL == nil || (u.URL.Scheme != "http" && u.URL.Scheme != "https") || u.URL.Host == "" {
			return fmt.Errorf("model upstream %s: no http or https URL with a host", u.Name)
		}
		if u.Key.v != "" {
			if err := checkKey(u.Key.v); err != nil {
				return fmt.Errorf("model upstream %s: its key %v", u.Name, err)
			}
		}
	}
	return nil
}
