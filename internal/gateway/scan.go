package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// eventReader reads what onEvent needs of an event's data (streamEvent)
// without encoding/json for the events providers send: a JSON object
// whose members kin reads are named in lower case ASCII without escapes,
// once each, with whole numbers for counts. It reads in one pass and
// allocates nothing per event: the reader, one a stream, is the storage
// streamEvent's pointers point into. Anything else (invalid JSON, a
// member named twice or in another case, a count that is not a whole
// number, deeper than maxScanDepth) it leaves to json.Unmarshal, so what
// it reads is what json.Unmarshal would (FuzzEventReaderAgreesWithJSON).
type eventReader struct {
	e         streamEvent
	usage     [3]usageStore // the event's, message's, response's
	message   usageHolder
	response  usageHolder
	choices   json.RawMessage
	fallback  streamEvent // json.Unmarshal's, when the reader gives up
	b         []byte
	i         int
	unsure    bool
	usageUsed int
}

// usageStore holds one rawUsage and what its pointers point at.
type usageStore struct {
	u        rawUsage
	n        [6]int64
	pd, id   tokenDetails
	pdn, idn int64
}

// maxScanDepth is how deep the reader follows nested values before it
// leaves the event to json.Unmarshal (whose limit is 10,000).
const maxScanDepth = 64

// read returns data's event, or false when data is not one (json.Unmarshal
// fails on it: the event is passed on and not read, as before).
func (r *eventReader) read(data []byte) (*streamEvent, bool) {
	if e, ok := r.scan(data); ok {
		return e, true
	}
	r.fallback = streamEvent{}
	if json.Unmarshal(data, &r.fallback) != nil {
		return nil, false
	}
	return &r.fallback, true
}

// scan is read's fast path: false when it leaves data to json.Unmarshal.
func (r *eventReader) scan(data []byte) (*streamEvent, bool) {
	r.e, r.choices, r.b, r.i, r.unsure, r.usageUsed = streamEvent{}, nil, data, 0, false, 0
	r.ws()
	if r.i >= len(r.b) || r.b[r.i] != '{' {
		return nil, false
	}
	var seen [5]bool
	r.object(func(key []byte) {
		k := r.member(key, topMembers[:], seen[:])
		switch k {
		case 0: // type
			switch {
			case r.peek() == 'n':
				r.literal("null")
			case r.peek() == '"':
				s, escaped := r.str()
				if escaped {
					r.unsure = true
				}
				r.e.Type = eventType(s)
			default:
				r.unsure = true
			}
		case 1: // usage
			r.e.Usage = r.usageValue()
		case 2: // choices
			start := r.i
			r.skip(1)
			if raw := r.b[start:r.i]; string(raw) != "null" {
				r.choices = raw
				r.e.Choices = &r.choices
			}
		case 3, 4: // message, response
			h := &r.message
			if k == 4 {
				h = &r.response
			}
			switch r.peek() {
			case 'n':
				r.literal("null") // the pointer stays nil, as json.Unmarshal leaves it
			case '{':
				*h = usageHolder{}
				var seenU [1]bool
				r.object(func(key []byte) {
					if r.member(key, holderMembers[:], seenU[:]) == 0 {
						h.Usage = r.usageValue()
						return
					}
					r.skip(2)
				}, 2)
				if k == 3 {
					r.e.Message = h
				} else {
					r.e.Response = h
				}
			default:
				r.unsure = true
			}
		default:
			r.skip(1)
		}
	}, 1)
	r.ws()
	if r.unsure || r.i != len(r.b) {
		return nil, false
	}
	return &r.e, true
}

// eventType is s as one of the types onEvent acts on, without copying
// it (the switch compares the bytes), or "" for any other: onEvent does
// nothing with the others.
func eventType(s []byte) string {
	switch string(s) {
	case "message_start":
		return "message_start"
	case "message_delta":
		return "message_delta"
	case "message_stop":
		return "message_stop"
	case "response.completed":
		return "response.completed"
	case "response.incomplete":
		return "response.incomplete"
	case "response.failed":
		return "response.failed"
	}
	return ""
}

var (
	topMembers    = [...]string{"type", "usage", "choices", "message", "response"}
	holderMembers = [...]string{"usage"}
	usageMembers  = [...]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
		"cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens_details", "input_tokens_details"}
	detailMembers = [...]string{"cached_tokens"}
)

// member is key's index in names, or -1 for a member kin does not read.
// A name json.Unmarshal might match otherwise (escaped, not ASCII, in
// another case) or a second time makes the reader unsure.
func (r *eventReader) member(key []byte, names []string, seen []bool) int {
	for _, c := range key {
		if c == '\\' || c >= 0x80 {
			r.unsure = true
			return -1
		}
	}
	for i, n := range names {
		if string(key) == n {
			if seen[i] {
				r.unsure = true
			}
			seen[i] = true
			return i
		}
		if bytes.EqualFold(key, []byte(n)) {
			r.unsure = true
			return -1
		}
	}
	return -1
}

// usageValue reads a usage object (nil for null).
func (r *eventReader) usageValue() *rawUsage {
	switch r.peek() {
	case 'n':
		r.literal("null")
		return nil
	case '{':
	default:
		r.unsure = true
		return nil
	}
	if r.usageUsed == len(r.usage) {
		r.unsure = true
		r.skip(2)
		return nil
	}
	s := &r.usage[r.usageUsed]
	r.usageUsed++
	*s = usageStore{}
	u := &s.u
	var seen [len(usageMembers)]bool
	r.object(func(key []byte) {
		k := r.member(key, usageMembers[:], seen[:])
		switch {
		case k < 0:
			r.skip(3)
		case k < 6:
			if r.count(&s.n[k]) {
				p := &s.n[k]
				switch k {
				case 0:
					u.PromptTokens = p
				case 1:
					u.CompletionTokens = p
				case 2:
					u.InputTokens = p
				case 3:
					u.OutputTokens = p
				case 4:
					u.CacheRead = p
				case 5:
					u.CacheCreation = p
				}
			}
		default:
			d, n := &s.pd, &s.pdn
			if k == 7 {
				d, n = &s.id, &s.idn
			}
			switch r.peek() {
			case 'n':
				r.literal("null")
			case '{':
				var seenD [1]bool
				r.object(func(key []byte) {
					if r.member(key, detailMembers[:], seenD[:]) == 0 {
						if r.count(n) {
							d.CachedTokens = n
						}
						return
					}
					r.skip(4)
				}, 4)
				if k == 6 {
					u.PromptDetails = d
				} else {
					u.InputDetails = d
				}
			default:
				r.unsure = true
			}
		}
	}, 3)
	return u
}

// count reads a whole number into n (false for null, n untouched).
func (r *eventReader) count(n *int64) bool {
	if r.peek() == 'n' {
		r.literal("null")
		return false
	}
	start := r.i
	if !r.number() {
		r.unsure = true
		return false
	}
	v, err := strconv.ParseInt(string(r.b[start:r.i]), 10, 64)
	if err != nil {
		r.unsure = true // a fraction, an exponent, too large: json's error
		return false
	}
	*n = v
	return true
}

// object reads an object at r.i, calling member for each key with r.i at
// its value, which member must read.
func (r *eventReader) object(member func(key []byte), depth int) {
	if depth > maxScanDepth || r.peek() != '{' {
		r.unsure = true
		return
	}
	r.i++
	r.ws()
	if r.peek() == '}' {
		r.i++
		return
	}
	for !r.unsure {
		r.ws()
		if r.peek() != '"' {
			r.unsure = true
			return
		}
		key, _ := r.str()
		r.ws()
		if r.peek() != ':' {
			r.unsure = true
			return
		}
		r.i++
		r.ws()
		member(key)
		r.ws()
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return
		default:
			r.unsure = true
			return
		}
	}
}

// skip reads any value.
func (r *eventReader) skip(depth int) {
	if depth > maxScanDepth {
		r.unsure = true
		return
	}
	switch c := r.peek(); {
	case c == '{':
		r.object(func([]byte) { r.skip(depth + 1) }, depth)
	case c == '[':
		r.i++
		r.ws()
		if r.peek() == ']' {
			r.i++
			return
		}
		for !r.unsure {
			r.ws()
			r.skip(depth + 1)
			r.ws()
			switch r.peek() {
			case ',':
				r.i++
			case ']':
				r.i++
				return
			default:
				r.unsure = true
				return
			}
		}
	case c == '"':
		r.str()
	case c == 't':
		r.literal("true")
	case c == 'f':
		r.literal("false")
	case c == 'n':
		r.literal("null")
	default:
		if !r.number() {
			r.unsure = true
		}
	}
}

// str reads a string and returns its bytes between the quotes, and
// whether it holds an escape.
func (r *eventReader) str() (s []byte, escaped bool) {
	r.i++ // the opening quote
	start := r.i
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			return r.b[start : r.i-1], escaped
		case c < 0x20:
			r.unsure = true
			return nil, escaped
		case c == '\\':
			escaped = true
			if r.i+1 >= len(r.b) {
				r.unsure = true
				return nil, escaped
			}
			switch r.b[r.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				r.i += 2
			case 'u':
				if r.i+6 > len(r.b) || !isHex4(r.b[r.i+2:r.i+6]) {
					r.unsure = true
					return nil, escaped
				}
				r.i += 6
			default:
				r.unsure = true
				return nil, escaped
			}
		default:
			r.i++
		}
	}
	r.unsure = true
	return nil, escaped
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *eventReader) number() bool {
	if r.peek() == '-' {
		r.i++
	}
	switch c := r.peek(); {
	case c == '0':
		r.i++
	case '1' <= c && c <= '9':
		r.digits()
	default:
		return false
	}
	if r.peek() == '.' {
		r.i++
		if !r.digits() {
			return false
		}
	}
	if c := r.peek(); c == 'e' || c == 'E' {
		r.i++
		if c := r.peek(); c == '+' || c == '-' {
			r.i++
		}
		if !r.digits() {
			return false
		}
	}
	return true
}

// digits reads one digit or more.
func (r *eventReader) digits() bool {
	start := r.i
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i > start
}

func (r *eventReader) literal(lit string) {
	if !bytes.HasPrefix(r.b[r.i:], []byte(lit)) {
		r.unsure = true
		return
	}
	r.i += len(lit)
}

// peek is the byte at r.i, 0 at the end.
func (r *eventReader) peek() byte {
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// ws skips JSON's white space.
func (r *eventReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}
