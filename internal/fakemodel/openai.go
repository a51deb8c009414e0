package fakemodel

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"time"
)

// chatRequest is the part of a chat completion request the server reads.
type chatRequest struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatUsage is OpenAI's CompletionUsage.
func (s *Server) chatUsage(out int) map[string]any {
	return map[string]any{
		"prompt_tokens":     s.opts.InputTokens,
		"completion_tokens": out,
		"total_tokens":      s.opts.InputTokens + out,
		"prompt_tokens_details": map[string]any{
			"cached_tokens": s.opts.CachedTokens,
			"audio_tokens":  0,
		},
		"completion_tokens_details": map[string]any{
			"reasoning_tokens":           0,
			"audio_tokens":               0,
			"accepted_prediction_tokens": 0,
			"rejected_prediction_tokens": 0,
		},
	}
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, body []byte) {
	var req chatRequest
	if !decode(w, openAI, body, &req) || !s.modelAllowed(w, openAI, req.Model) {
		return
	}
	if req.StreamOptions != nil && !req.Stream {
		writeErrorParam(w, http.StatusBadRequest, "invalid_request_error",
			"The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", "")
		return
	}
	limit := req.MaxCompletionTokens
	if limit == 0 {
		limit = req.MaxTokens
	}
	out, reply, capped := s.output(limit)
	finish := "stop"
	if capped {
		finish = "length"
	}
	id := "chatcmpl-" + randomID()
	created := time.Now().Unix()
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{
			"id":      id,
			"object":  "chat.completion",
			"created": created,
			"model":   req.Model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": reply, "refusal": nil, "annotations": []any{}},
				"logprobs":      nil,
				"finish_reason": finish,
			}},
			"usage":              s.chatUsage(out),
			"service_tier":       "default",
			"system_fingerprint": "fp_fakemodel",
		})
		return
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chunk := func(choices []any) map[string]any {
		c := map[string]any{
			"id":                 id,
			"object":             "chat.completion.chunk",
			"created":            created,
			"model":              req.Model,
			"service_tier":       "default",
			"system_fingerprint": "fp_fakemodel",
			"choices":            choices,
		}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	choice := func(delta map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	}
	st := s.startStream(w, r)
	if st.event("", chunk(choice(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))) != nil {
		return
	}
	for _, c := range s.chunks(reply) {
		if !st.wait() || st.event("", chunk(choice(map[string]any{"content": c}, nil))) != nil {
			return
		}
	}
	if st.event("", chunk(choice(map[string]any{}, finish))) != nil {
		return
	}
	if includeUsage {
		last := chunk([]any{})
		last["usage"] = s.chatUsage(out)
		if st.event("", last) != nil {
			return
		}
	}
	_ = st.event("", "[DONE]")
}

// responsesRequest is the part of a Responses API request the server reads.
type responsesRequest struct {
	Model           string `json:"model"`
	Stream          bool   `json:"stream"`
	MaxOutputTokens *int   `json:"max_output_tokens"`
	Instructions    any    `json:"instructions"`
	Store           *bool  `json:"store"`
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	var req responsesRequest
	if !decode(w, openAI, body, &req) || !s.modelAllowed(w, openAI, req.Model) {
		return
	}
	limit := 0
	if req.MaxOutputTokens != nil {
		limit = *req.MaxOutputTokens
	}
	out, reply, capped := s.output(limit)
	id := "resp_" + randomID()
	msgID := "msg_" + randomID()
	created := time.Now().Unix()
	store := true
	if req.Store != nil {
		store = *req.Store
	}
	part := func(text string) map[string]any {
		return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
	}
	item := func(status string, content []any) map[string]any {
		return map[string]any{"id": msgID, "type": "message", "status": status, "role": "assistant", "content": content}
	}
	response := func(status string, output []any, usage any) map[string]any {
		resp := map[string]any{
			"id":                   id,
			"object":               "response",
			"created_at":           created,
			"status":               status,
			"background":           false,
			"error":                nil,
			"incomplete_details":   nil,
			"instructions":         req.Instructions,
			"max_output_tokens":    req.MaxOutputTokens,
			"model":                req.Model,
			"output":               output,
			"parallel_tool_calls":  true,
			"previous_response_id": nil,
			"reasoning":            map[string]any{"effort": nil, "summary": nil},
			"service_tier":         "default",
			"store":                store,
			"temperature":          1.0,
			"text":                 map[string]any{"format": map[string]any{"type": "text"}},
			"tool_choice":          "auto",
			"tools":                []any{},
			"top_p":                1.0,
			"truncation":           "disabled",
			"usage":                usage,
			"user":                 nil,
			"metadata":             map[string]any{},
		}
		if status == "incomplete" {
			resp["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
		}
		return resp
	}
	usage := map[string]any{
		"input_tokens":          s.opts.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": s.opts.CachedTokens},
		"output_tokens":         out,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          s.opts.InputTokens + out,
	}
	// A response cut by max_output_tokens is "incomplete", and so is its
	// message; its stream ends with response.incomplete.
	final, itemStatus := "completed", "completed"
	if capped {
		final, itemStatus = "incomplete", "incomplete"
	}
	done := item(itemStatus, []any{part(reply)})
	if !req.Stream {
		writeJSON(w, http.StatusOK, response(final, []any{done}, usage))
		return
	}
	st := s.startStream(w, r)
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return st.event(typ, fields) == nil
	}
	if !send("response.created", map[string]any{"response": response("in_progress", []any{}, nil)}) ||
		!send("response.in_progress", map[string]any{"response": response("in_progress", []any{}, nil)}) ||
		!send("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", []any{})}) ||
		!send("response.content_part.added", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": part("")}) {
		return
	}
	for _, c := range s.chunks(reply) {
		if !st.wait() || !send("response.output_text.delta", map[string]any{
			"item_id": msgID, "output_index": 0, "content_index": 0, "delta": c, "logprobs": []any{},
		}) {
			return
		}
	}
	if !send("response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": reply, "logprobs": []any{}}) ||
		!send("response.content_part.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": part(reply)}) ||
		!send("response.output_item.done", map[string]any{"output_index": 0, "item": done}) {
		return
	}
	send("response."+final, map[string]any{"response": response(final, []any{done}, usage)})
}

// embeddingsRequest is the part of an embeddings request the server reads.
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     int             `json:"dimensions"`
}

// defaultDimensions is an embedding's length when the request names none.
const defaultDimensions = 8

func (s *Server) embeddings(w http.ResponseWriter, _ *http.Request, body []byte) {
	var req embeddingsRequest
	if !decode(w, openAI, body, &req) || !s.modelAllowed(w, openAI, req.Model) {
		return
	}
	n, ok := inputCount(req.Input)
	if !ok {
		writeErrorParam(w, http.StatusBadRequest, "invalid_request_error",
			"'input' must be a string, an array of strings, an array of tokens or an array of token arrays, and not empty", "input", "")
		return
	}
	dims := req.Dimensions
	if dims <= 0 {
		dims = defaultDimensions
	}
	if dims > 4096 {
		writeErrorParam(w, http.StatusBadRequest, "invalid_request_error", "'dimensions' is above 4096", "dimensions", "")
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		writeErrorParam(w, http.StatusBadRequest, "invalid_request_error",
			"'encoding_format' must be 'float' or 'base64'", "encoding_format", "")
		return
	}
	data := make([]any, n)
	for i := range n {
		vec := make([]float32, dims)
		for j := range vec {
			vec[j] = float32(i+1) / float32(j+2)
		}
		var emb any = vec
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*dims)
			for j, f := range vec {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]any{"prompt_tokens": s.opts.InputTokens, "total_tokens": s.opts.InputTokens},
	})
}

// inputCount is how many embeddings an input asks for: one for a string
// or an array of tokens, one per element of an array of strings or of
// token arrays.
func inputCount(raw json.RawMessage) (int, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return 1, one != ""
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		return 0, false
	}
	var tok float64
	if json.Unmarshal(many[0], &tok) == nil {
		return 1, true // one array of tokens
	}
	return len(many), true
}

// models lists the models, in the provider's shape.
func (s *Server) models(w http.ResponseWriter, r *http.Request, _ []byte) {
	names := s.opts.Models
	if len(names) == 0 {
		names = DefaultModels
	}
	p := apiOf(r)
	data := make([]any, len(names))
	for i, m := range names {
		data[i] = modelObject(p, m)
	}
	if p == anthropic {
		writeJSON(w, http.StatusOK, map[string]any{
			"data": data, "has_more": false, "first_id": names[0], "last_id": names[len(names)-1],
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// model retrieves one model.
func (s *Server) model(w http.ResponseWriter, r *http.Request, _ []byte) {
	p := apiOf(r)
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	names := s.opts.Models
	if len(names) == 0 {
		names = DefaultModels
	}
	for _, m := range names {
		if m == name {
			writeJSON(w, http.StatusOK, modelObject(p, m))
			return
		}
	}
	if p == anthropic {
		writeError(w, p, http.StatusNotFound, "not_found_error", "model: "+name)
		return
	}
	writeErrorParam(w, http.StatusNotFound, "invalid_request_error",
		"The model '"+name+"' does not exist", "model", "model_not_found")
}

// created is the models' creation time: fixed, as the providers' are.
var created = time.Date(2024, 7, 18, 0, 0, 0, 0, time.UTC)

func modelObject(p api, name string) map[string]any {
	if p == anthropic {
		return map[string]any{"type": "model", "id": name, "display_name": name, "created_at": created.Format(time.RFC3339)}
	}
	return map[string]any{"id": name, "object": "model", "created": created.Unix(), "owned_by": "fakemodel"}
}
