// An agent's model call through the official SDKs, configured only by its
// environment (OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL,
// ANTHROPIC_API_KEY: what kin gives each agent).
//
//   node call.mjs KIND [MODEL] [--include-usage] [--max-tokens N]
//
// KIND is chat, chat-stream, responses, responses-stream, embeddings,
// models, messages, messages-stream or count-tokens. It prints one JSON
// line: {"ok":true,"text":...,"usage":...,"events":N} with what the SDK
// returned, or {"ok":false,"status":...,"error":...} with the error as the
// SDK surfaces it (then exits 3; 4 on anything else).
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

const args = process.argv.slice(2);
const kind = args[0];
const flag = (name) => args.includes(name);
const value = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : undefined;
};
const positional = args.slice(1).filter((a, i, all) => !a.startsWith("--") && !(i > 0 && all[i - 1] === "--max-tokens"));
const anthropicKinds = new Set(["messages", "messages-stream", "count-tokens"]);
const model = positional[0] ?? (anthropicKinds.has(kind) ? "claude-3-5-haiku-latest" : kind === "embeddings" ? "text-embedding-3-small" : "gpt-4o-mini");
const maxTokens = value("--max-tokens");

// No retries: a refusal is what the test looks at, once.
const openai = () => new OpenAI({ maxRetries: 0 });
const anthropic = () => new Anthropic({ maxRetries: 0 });
const user = [{ role: "user", content: "say ok" }];

async function call() {
  switch (kind) {
    case "chat": {
      const r = await openai().chat.completions.create({ model, messages: user, ...(maxTokens ? { max_completion_tokens: maxTokens } : {}) });
      return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, usage: r.usage, model: r.model };
    }
    case "chat-stream": {
      const stream = await openai().chat.completions.create({
        model, messages: user, stream: true,
        ...(flag("--include-usage") ? { stream_options: { include_usage: true } } : {}),
        ...(maxTokens ? { max_completion_tokens: maxTokens } : {}),
      });
      let text = "", usage = null, events = 0, finish = null;
      for await (const chunk of stream) {
        events++;
        text += chunk.choices[0]?.delta?.content ?? "";
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      return { text, finish, usage, events };
    }
    case "responses": {
      const r = await openai().responses.create({ model, input: "say ok", ...(maxTokens ? { max_output_tokens: maxTokens } : {}) });
      return { text: r.output_text, status: r.status, usage: r.usage };
    }
    case "responses-stream": {
      const stream = await openai().responses.create({ model, input: "say ok", stream: true, ...(maxTokens ? { max_output_tokens: maxTokens } : {}) });
      let text = "", usage = null, events = 0, status = null;
      for await (const ev of stream) {
        events++;
        if (ev.type === "response.output_text.delta") text += ev.delta;
        if (ev.type === "response.completed" || ev.type === "response.incomplete") {
          usage = ev.response.usage;
          status = ev.response.status;
        }
      }
      return { text, status, usage, events };
    }
    case "embeddings": {
      const r = await openai().embeddings.create({ model, input: ["say", "ok"] });
      return { text: `${r.data.length} embeddings of ${r.data[0].embedding.length}`, usage: r.usage };
    }
    case "models": {
      const names = [];
      for await (const m of openai().models.list()) names.push(m.id);
      return { text: names.join(",") };
    }
    case "messages": {
      const r = await anthropic().messages.create({ model, max_tokens: maxTokens ?? 1024, messages: user });
      return { text: r.content.map((b) => b.text ?? "").join(""), stop: r.stop_reason, usage: r.usage };
    }
    case "messages-stream": {
      // The SDK's helper accumulates message_start's and message_delta's
      // usage into the final message.
      const stream = anthropic().messages.stream({ model, max_tokens: maxTokens ?? 1024, messages: user });
      let events = 0;
      stream.on("streamEvent", () => events++);
      const r = await stream.finalMessage();
      return { text: r.content.map((b) => b.text ?? "").join(""), stop: r.stop_reason, usage: r.usage, events };
    }
    case "count-tokens": {
      const r = await anthropic().messages.countTokens({ model, messages: user });
      return { text: "", usage: r };
    }
    default:
      throw new Error(`unknown kind ${JSON.stringify(kind)}`);
  }
}

try {
  console.log(JSON.stringify({ ok: true, ...(await call()) }));
} catch (err) {
  if (err instanceof OpenAI.APIError || err instanceof Anthropic.APIError) {
    // OpenAI's error is the body's "error" object; Anthropic's is the
    // whole body ({"type":"error","error":{...}}).
    console.log(JSON.stringify({ ok: false, status: err.status ?? null, error: err.error ?? null, message: err.message }));
    process.exit(3);
  }
  console.log(JSON.stringify({ ok: false, status: null, error: null, message: String(err?.stack ?? err) }));
  process.exit(4);
}
