// Package sim is the upstream simulator: a deterministic OpenAI-compatible
// model server on fasthttp. It streams tokens with a configurable time to
// first token and inter-token latency, reasons, calls tools, answers JSON
// modes, plays a guard model, embeds and reranks, and injects the faults
// real upstreams show. The gateway falls back to it when no upstream is
// configured, tests use it as their upstream, and `gateway sim` serves it on
// its own.
//
// # Routes
//
//	POST /v1/chat/completions   chat, streaming or not
//	POST /v1/embeddings         OpenAI embeddings
//	POST /rerank, /v1/rerank    Cohere/Jina-style rerank
//	GET  /v1/models             one model, "sim"
//	GET  /health                {"status":"ok"}
//
// Unknown paths are 404 and a wrong method 405, both with an OpenAI error
// body; a body that cannot be decoded is 400 invalid_request_error.
//
// # Determinism
//
// A chat reply is a function of the request body: its seed is the FNV-64a
// hash of the body bytes XOR Config.Seed. The same body gets byte-identical
// non-streaming replies and identical stream frames for the life of a
// server ("created" is the server's start time). Reply text is
// tokens.AppendWords: exactly one o200k_base token per stream chunk.
//
// usage.prompt_tokens is tokens.CountChat of the request's messages and
// tools (array content counts its text parts joined by newlines);
// completion_tokens is the number of token chunks of the stream: reasoning
// chunks, content chunks and tool-call fragments (a call's first fragment,
// with its name, counts one; each argument fragment is one token).
//
// # Reply length
//
// max_tokens (or max_completion_tokens) is the budget; reasoning spends it
// first. Without a [[sim:tokens=N]] directive the content is 64 tokens, or
// what reasoning left of the budget when that is less, and finishes "stop".
// When the reply asked for (reasoning, content, tool calls) exceeds the
// budget, or reasoning spends all of it, the reply is cut at the budget and
// finishes "length" (content may then be empty; a tool call's arguments
// may be cut).
//
// # Directives
//
// Markers in the text of the last user message steer the reply (content
// string, or the text parts of an array content). Several may appear; a
// later marker overrides an earlier one of the same name. An unknown name
// or a bad value is 400.
//
//	[[sim:tokens=N]]          content of N tokens, still capped by max_tokens
//	[[sim:ttft_ms=N]]         time to first token for this request
//	[[sim:itl_ms=N]]          inter-token latency for this request
//	[[sim:reasoning=N]]       N reasoning tokens first (reasoning_content), unless
//	                          reasoning_effort is "none"
//	[[sim:tool=A]]            call declared tool A with arguments valid for its schema;
//	[[sim:tool=A,B]]          several parallel calls, fragments interleaved by index
//	                          (only A when parallel_tool_calls is false, as OpenAI's
//	                          models then call one tool); 400 when a name is not
//	                          declared; ignored when the conversation ends with a
//	                          tool result, so a tool loop ends with text. Ids are
//	                          tc_ and 16 hex digits.
//	[[sim:status=CODE]]       answer CODE (400 to 599) with an OpenAI error body
//	[[sim:fail_first=N]]      503 for the first N attempts of this exact body, then success
//	[[sim:drop_after=N]]      stream: close the connection after N token chunks (no
//	                          finish, no [DONE], unterminated chunked body);
//	                          not streaming: half the body, then close
//	[[sim:finish=R]]          force finish_reason R: stop, length, content_filter, tool_calls
//	[[sim:json]]              content is JSON valid for response_format's json_schema
//	                          (an object {"answer":…} without a schema)
//	[[sim:json_invalid]]      content is JSON the schema refuses (a required property
//	                          left out, or a wrong type); without a schema, an
//	                          unterminated object
//	[[sim:reply=TEXT]]        content is exactly TEXT (which cannot hold "]]"), as
//	                          written: spaces kept, no JSON check; tool calls and the
//	                          guard model take precedence
//	[[sim:unsafe=S1,S10]]     guard model: answer unsafe with these codes
//	                          ([[sim:unsafe]] alone: unsafe with no code line)
//	[[sim:garbled]]           guard model: answer text that is not a verdict
//	[[sim:tie]]               rerank (in the query): every document scores 0.5,
//	                          so the order falls to the index
//	[[sim:fault=KIND]]        a failure, below
//	[[sim:facts=K:V|K2:V2]]   a memory extractor's request (one with a json_schema
//	                          response format) answers {"facts":[{"kind":"preference",
//	                          "key":K,"value":V},…]}; other requests ignore it
//	[[sim:facts_fault=F]]     such an extractor request hangs (F = hang) or answers
//	                          500 (F = error)
//
// With response_format json_object or json_schema and no json directive the
// reply is valid JSON, as from a model that honours it. Tool arguments and
// JSON content are minimal instances: required properties only, first enum
// value, anyOf/oneOf first branch, allOf merged, local $ref followed,
// numbers nearest zero within bounds, fixed values for common string
// formats; "pattern" is not honoured. Without a directive, tool_choice
// {"type":"function","function":{"name":…}} calls that tool and "required"
// the first declared one.
//
// Fault kinds:
//
//	reset              close the connection before writing a byte (TCP reset)
//	hang               never answer; hold the connection until the client leaves or
//	                   the server shuts down
//	stall_after=N      stream: N token chunks, then silence until the client leaves;
//	                   not streaming: the response head, then silence
//	malformed_after=N  stream: N token chunks, then a data: frame that is not JSON,
//	                   then the body ends; not streaming: half the JSON body
//	no_done            stream: finish (and usage) frames, but no [DONE]
//	rate_limited       429 rate_limit_exceeded with Retry-After: 1
//	rate_limited_bare  429 rate_limit_exceeded without Retry-After
//	context_length     400 context_length_exceeded (param "messages")
//	content_filter     400 content_filter (param "prompt"), as Azure OpenAI sends
//
// Precedence: request validation (400), then fault=reset, fault=hang,
// status, fail_first, the error faults, and last the reply with its stream
// faults. N counts token chunks (reasoning, content or tool fragments); when
// N is at least the reply's length the fault strikes before the finish
// frame.
//
// Embeddings and rerank read the same directives in their inputs (every
// input, or the query), honouring status, fail_first and the faults that
// fail a whole request (reset, hang, rate_limited, rate_limited_bare,
// context_length, content_filter), and ttft_ms as the time before the
// answer.
//
// # Guard
//
// A model named gw-guard, or starting with "guard", answers like Llama
// Guard: "safe", or "unsafe" and a line of hazard codes, ascending, such as
// "unsafe\nS1,S10". It is unsafe when the last user text has an unsafe
// directive or one of the trigger words murder (S1), steal (S2), doxx (S7),
// bomb (S9), slur (S10) or suicide (S11), matched as whole words in any
// case.
//
// # Embeddings and rerank
//
// An embedding is a unit vector of DefaultDimensions floats (or the
// request's "dimensions") drawn from the FNV-64a hash of its input XOR
// Config.Seed; "encoding_format":"base64" is honoured. usage.prompt_tokens
// is the sum of tokens.Count over the inputs. A rerank score is the cosine
// of the word sets of query and document, scaled to at most 0.99, plus a
// deterministic tie-breaker below 0.01; results are sorted by score, then
// index, and cut to top_n; usage.total_tokens counts the query and every
// document once. A rerank body with "texts" instead of "documents" is
// text-embeddings-inference's: it is answered as TEI does, a bare array of
// {index, score}.
package sim
