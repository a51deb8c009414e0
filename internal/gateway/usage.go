package gateway

import (
	"encoding/json"
)

// usage is what a call used, as kin counts it: input every prompt token
// (cached ones included), cached those read from the provider's cache,
// output every completion token.
type usage struct {
	input, output, cached int64
}

// rawUsage is a usage object of either API, every field optional:
// OpenAI chat and embeddings (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens), OpenAI responses (input_tokens,
// output_tokens, input_tokens_details.cached_tokens), Anthropic
// (input_tokens, output_tokens, cache_read_input_tokens,
// cache_creation_input_tokens; input_tokens excludes both).
type rawUsage struct {
	PromptTokens     *int64        `json:"prompt_tokens"`
	CompletionTokens *int64        `json:"completion_tokens"`
	InputTokens      *int64        `json:"input_tokens"`
	OutputTokens     *int64        `json:"output_tokens"`
	CacheRead        *int64        `json:"cache_read_input_tokens"`
	CacheCreation    *int64        `json:"cache_creation_input_tokens"`
	PromptDetails    *tokenDetails `json:"prompt_tokens_details"`
	InputDetails     *tokenDetails `json:"input_tokens_details"`
}

// tokenDetails is OpenAI's breakdown of a count: the cached tokens.
type tokenDetails struct {
	CachedTokens *int64 `json:"cached_tokens"`
}

func val(p *int64) int64 {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}

// of normalises r as api reports it.
func (r *rawUsage) of(api API) usage {
	if r == nil {
		return usage{}
	}
	if api == Anthropic {
		read := val(r.CacheRead)
		return usage{input: val(r.InputTokens) + read + val(r.CacheCreation), output: val(r.OutputTokens), cached: read}
	}
	u := usage{input: val(r.PromptTokens), output: val(r.CompletionTokens)}
	if r.PromptTokens == nil {
		u.input = val(r.InputTokens)
	}
	if r.CompletionTokens == nil {
		u.output = val(r.OutputTokens)
	}
	if d := r.PromptDetails; d != nil {
		u.cached = val(d.CachedTokens)
	} else if d := r.InputDetails; d != nil {
		u.cached = val(d.CachedTokens)
	}
	u.cached = min(u.cached, u.input)
	return u
}

// usageOfBody reads the usage of a whole (non-streamed) answer.
func usageOfBody(api API, b []byte) usage {
	var body struct {
		Usage *rawUsage `json:"usage"`
	}
	if json.Unmarshal(b, &body) != nil {
		return usage{}
	}
	return body.Usage.of(api)
}

// streamEvent is what the gateway reads of one server-sent event's data.
type streamEvent struct {
	Type    string           `json:"type"`
	Usage   *rawUsage        `json:"usage"`
	Choices *json.RawMessage `json:"choices"`
	// Anthropic's message_start carries its usage in message.
	Message *usageHolder `json:"message"`
	// OpenAI responses' response.completed carries it in response.
	Response *usageHolder `json:"response"`
}

// usageHolder is an object of which the gateway reads the usage.
type usageHolder struct {
	Usage *rawUsage `json:"usage"`
}

// merge sets u's fields from n where n has them: Anthropic's counts in
// message_delta are cumulative and may repeat or extend message_start's.
func (u *usage) merge(n *rawUsage, api API) {
	if n == nil {
		return
	}
	v := n.of(api)
	if api == Anthropic {
		if n.InputTokens != nil || n.CacheRead != nil || n.CacheCreation != nil {
			u.input = max(u.input, v.input)
			u.cached = max(u.cached, v.cached)
		}
		if n.OutputTokens != nil {
			u.output = max(u.output, v.output)
		}
		return
	}
	*u = v
}
