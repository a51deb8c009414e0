package aauth

import (
	"errors"
	"net/http"
	"slices"

	"github.com/dunglas/httpsfv"
)

// ParseRequirement parses an AAuth-Requirement value: an RFC 8941 Dictionary
// whose requirement member is a Token. Its String and Token parameters are
// returned; parameters of other types and other members are ignored, as the
// draft asks of recipients.
func ParseRequirement(value string) (requirement string, params map[string]string, err error) {
	d, err := httpsfv.UnmarshalDictionary([]string{value})
	if err != nil {
		return "", nil, errors.New("aauth: AAuth-Requirement is not a structured-field dictionary")
	}
	m, ok := d.Get("requirement")
	if !ok {
		return "", nil, errors.New("aauth: AAuth-Requirement has no requirement member")
	}
	it, ok := m.(httpsfv.Item)
	if !ok {
		return "", nil, errors.New("aauth: AAuth-Requirement requirement is not an item")
	}
	tok, ok := it.Value.(httpsfv.Token)
	if !ok {
		return "", nil, errors.New("aauth: AAuth-Requirement requirement is not a token")
	}
	params = map[string]string{}
	if it.Params != nil {
		for _, name := range it.Params.Names() {
			v, _ := it.Params.Get(name)
			switch v := v.(type) {
			case string:
				params[name] = v
			case httpsfv.Token:
				params[name] = string(v)
			}
		}
	}
	return string(tok), params, nil
}

// formatRequirement renders requirement with params as Strings, in name
// order.
func formatRequirement(requirement string, params map[string]string) (string, error) {
	p := httpsfv.NewParams()
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		p.Add(k, params[k])
	}
	d := httpsfv.NewDictionary()
	d.Add("requirement", httpsfv.Item{Value: httpsfv.Token(requirement), Params: p})
	return httpsfv.Marshal(d)
}

// ResourceToken returns the resource-token parameter of an AAuth-Requirement:
// requirement=auth-token header in h.
func ResourceToken(h http.Header) (string, bool) {
	vals := h.Values(HeaderRequirement)
	if len(vals) == 0 {
		return "", false
	}
	joined := vals[0]
	for _, v := range vals[1:] {
		joined += ", " + v
	}
	req, params, err := ParseRequirement(joined)
	if err != nil || req != RequirementAuthToken || params["resource-token"] == "" {
		return "", false
	}
	return params["resource-token"], true
}
