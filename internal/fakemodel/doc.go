// Package fakemodel is a fake model provider: a real HTTP server that
// speaks the two APIs agents use, OpenAI's (/v1/chat/completions,
// /v1/responses, /v1/embeddings, /v1/models) and Anthropic's Messages API
// (/v1/messages, /v1/messages/count_tokens), streaming (SSE, flushed per
// event) and not, with the usage fields and error shapes the providers
// document. It answers every call with the same reply and the token counts
// it was given, so a test can say exactly what a call must cost.
//
// Tests start one with Start (closed when the test ends); "kin dev
// fake-model" runs one as a process, for the README's walk-through and for
// tests in other languages.
//
// It must never call a real provider, hold a real key, or answer anything
// but what its Options say: it is the upstream kin's model gateway is
// tested against, not a model.
package fakemodel
