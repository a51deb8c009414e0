package httpsig

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/dunglas/httpsfv"
)

// SignatureBase returns the RFC 9421 §2.5 signature base of req for one
// Signature-Input member value, e.g.
//
//	("@method" "@path");created=1618884473;keyid="test-key-ed25519"
//
// It supports the derived components @method, @authority, @path, @query,
// @scheme, @target-uri and @request-target, and header fields without
// component parameters. A component that is absent from req is an error.
func SignatureBase(req *http.Request, signatureInputMember string) (string, error) {
	list, err := httpsfv.UnmarshalList([]string{signatureInputMember})
	if err != nil || len(list) != 1 {
		return "", errors.New("httpsig: signature input is not one inner list")
	}
	il, ok := list[0].(httpsfv.InnerList)
	if !ok {
		return "", errors.New("httpsig: signature input is not an inner list")
	}
	components, err := componentNames(il)
	if err != nil {
		return "", err
	}
	return signatureBase(req, components, il)
}

// componentNames returns the covered component identifiers of il: Strings,
// lowercase, without parameters, without duplicates (RFC 9421 §2.5).
func componentNames(il httpsfv.InnerList) ([]string, error) {
	names := make([]string, 0, len(il.Items))
	seen := make(map[string]bool, len(il.Items))
	for _, it := range il.Items {
		s, ok := it.Value.(string)
		if !ok {
			return nil, errors.New("httpsig: covered component is not a string")
		}
		if it.Params != nil && len(it.Params.Names()) > 0 {
			return nil, fmt.Errorf("httpsig: component parameters are not supported (%q)", s)
		}
		if s == "" || s != strings.ToLower(s) {
			return nil, fmt.Errorf("httpsig: component %q is not a lowercase name", s)
		}
		if seen[s] {
			return nil, fmt.Errorf("httpsig: component %q covered twice", s)
		}
		seen[s] = true
		names = append(names, s)
	}
	return names, nil
}

func signatureBase(req *http.Request, components []string, il httpsfv.InnerList) (string, error) {
	params, err := httpsfv.Marshal(httpsfv.List{il})
	if err != nil {
		return "", fmt.Errorf("httpsig: serializing signature params: %w", err)
	}
	var b strings.Builder
	for _, c := range components {
		v, err := componentValue(req, c)
		if err != nil {
			return "", err
		}
		b.WriteString(`"`)
		b.WriteString(c)
		b.WriteString(`": `)
		b.WriteString(v)
		b.WriteString("\n")
	}
	b.WriteString(`"@signature-params": `)
	b.WriteString(params)
	return b.String(), nil
}

func componentValue(req *http.Request, name string) (string, error) {
	switch name {
	case "@method":
		return req.Method, nil
	case "@authority":
		return authority(req), nil
	case "@scheme":
		return scheme(req), nil
	case "@path":
		return path(req), nil
	case "@query":
		return "?" + req.URL.RawQuery, nil
	case "@target-uri":
		u := scheme(req) + "://" + authority(req) + path(req)
		if req.URL.RawQuery != "" || req.URL.ForceQuery {
			u += "?" + req.URL.RawQuery
		}
		return u, nil
	case "@request-target":
		rt := path(req)
		if req.URL.RawQuery != "" || req.URL.ForceQuery {
			rt += "?" + req.URL.RawQuery
		}
		return rt, nil
	case "@signature-params":
		return "", errors.New("httpsig: @signature-params cannot be covered")
	}
	if strings.HasPrefix(name, "@") {
		return "", fmt.Errorf("httpsig: unsupported derived component %q", name)
	}
	vals := req.Header.Values(name)
	if name == "host" && len(vals) == 0 && req.Host != "" {
		vals = []string{req.Host}
	}
	if len(vals) == 0 {
		return "", fmt.Errorf("httpsig: covered header %q is absent", name)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		if strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("httpsig: header %q holds a line break", name)
		}
		out[i] = strings.Trim(v, " \t")
	}
	return strings.Join(out, ", "), nil
}

func scheme(req *http.Request) string {
	if req.URL != nil && req.URL.Scheme != "" {
		return strings.ToLower(req.URL.Scheme)
	}
	if req.TLS != nil {
		return "https"
	}
	return "http"
}

// authority is the host as the signer addressed it, lowercased, without the
// scheme's default port (RFC 9421 §2.2.3).
func authority(req *http.Request) string {
	h := req.Host
	if h == "" && req.URL != nil {
		h = req.URL.Host
	}
	h = strings.ToLower(h)
	if host, port, err := net.SplitHostPort(h); err == nil {
		if (port == "443" && scheme(req) == "https") || (port == "80" && scheme(req) == "http") {
			if strings.Contains(host, ":") {
				return "[" + host + "]"
			}
			return host
		}
	}
	return h
}

func path(req *http.Request) string {
	p := req.URL.EscapedPath()
	if p == "" {
		return "/"
	}
	return p
}
