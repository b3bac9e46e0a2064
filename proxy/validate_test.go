package proxy

import (
	"strings"
	"testing"

	"github.com/bytedance/sonic"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
)

// Principals the validation cases run as.
var (
	devKey      = &hotpath.Principal{KeyID: "k-dev", Kind: hotpath.KindDeveloper}
	signedInKey = &hotpath.Principal{KeyID: "k-in", Kind: hotpath.KindSignedIn}
	headlessKey = &hotpath.Principal{KeyID: "k-hl", Kind: hotpath.KindHeadless}
	chatOnlyKey = &hotpath.Principal{KeyID: "k-chat", Kind: hotpath.KindSignedIn, Scopes: mustScopes("chat")}
	memoryKey   = &hotpath.Principal{KeyID: "k-mem", Kind: hotpath.KindDeveloper, Scopes: mustScopes("chat", "memory")}
	filesKey    = &hotpath.Principal{KeyID: "k-files", Kind: hotpath.KindDeveloper, Scopes: mustScopes("chat", "files")}
	miraOnlyKey = &hotpath.Principal{KeyID: "k-mira", Kind: hotpath.KindDeveloper, Models: []string{"mira"}}
)

func mustScopes(names ...string) hotpath.Scopes {
	s, err := hotpath.ParseScopes(names)
	if err != nil {
		panic(err)
	}
	return s
}

// chatBody is a small valid request on vaani with extra top-level fields
// spliced in (each starting with a comma).
func chatBody(extra string) string {
	return `{"model":"vaani","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]` + extra + `}`
}

// messagesBody is a request on vaani with the given messages array.
func messagesBody(messages string) string {
	return `{"model":"vaani","messages":` + messages + `}`
}

// toolsBody declares one tool whose parameters are params.
func toolsBody(params string) string {
	return chatBody(`,"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + params + `}}]`)
}

// schemaBody asks for a json_schema response format with the given schema.
func schemaBody(schema string) string {
	return chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":` + schema + `}}`)
}

// nested returns a JSON object nested depth levels deep: {"a":{"a":...{}}}.
func nested(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

// nestedSchema returns a schema nested depth levels deep, alternating
// schemas and properties maps: {"properties":{"a":{"properties":...}}}.
func nestedSchema(depth int) string {
	cur := `{}`
	for level := depth - 1; level >= 1; level-- {
		if level%2 == 1 {
			cur = `{"properties":` + cur + `}`
		} else {
			cur = `{"a":` + cur + `}`
		}
	}
	return cur
}

// manyNodes returns an object with n values in total: the object itself and
// n-1 numbers in an array (the array counts too, so n-2 numbers).
func manyNodes(n int) string {
	return `{"enum":[` + strings.TrimSuffix(strings.Repeat(`1,`, n-2), ",") + `]}`
}

func decodeChat(t testing.TB, body string) *codec.ChatRequest {
	t.Helper()
	var req codec.ChatRequest
	require.NoError(t, sonic.Unmarshal([]byte(body), &req), "body: %s", body)
	return &req
}

type validateCase struct {
	name    string
	body    string
	wire    chatWire // chatV1 when zero
	key     *hotpath.Principal
	tiers   []hotpath.Tier // DefaultTiers when nil
	version codec.Version  // CurrentVersion when zero
	pinned  bool

	code    codec.Code // 0: accepted
	msg     string     // a substring of the refusal's message
	detail  codec.Detail
	check   func(t *testing.T, p chatIntent) // for accepted requests
	anyWire bool                             // run the case on all three wires
}

func runValidateCases(t *testing.T, cases []validateCase) {
	t.Helper()
	for _, tc := range cases {
		wires := []chatWire{tc.wire}
		if tc.wire == 0 {
			wires[0] = chatV1
		}
		if tc.anyWire {
			wires = []chatWire{chatV1, chatV2, chatOpenAI}
		}
		for _, wire := range wires {
			name := tc.name
			if tc.anyWire {
				name += "/" + [...]string{"", "v1", "v2", "openai"}[wire]
			}
			t.Run(name, func(t *testing.T) {
				req := decodeChat(t, tc.body)
				key := tc.key
				if key == nil {
					key = devKey
				}
				tiers := tc.tiers
				if tiers == nil {
					tiers = hotpath.DefaultTiers()
				}
				version := tc.version
				if version == 0 {
					version = codec.CurrentVersion
				}
				intent, cerr := validateChat(req, wire, tiers, key, version, tc.pinned)
				if tc.code == 0 {
					require.Nil(t, cerr, "unexpected refusal")
					if tc.check != nil {
						tc.check(t, intent)
					}
					return
				}
				require.NotNil(t, cerr, "expected %s", tc.code)
				require.Equal(t, chatIntent{}, intent, "a refusal intends nothing")
				require.Equal(t, tc.code.String(), cerr.Code.String(), "message: %s", cerr.Message)
				require.Equal(t, tc.code.Status(), cerr.Status())
				require.Contains(t, cerr.Message, tc.msg)
				require.Equal(t, tc.detail, cerr.Detail)
			})
		}
	}
}

func TestValidateModel(t *testing.T) {
	kaviOnly := hotpath.DefaultTiers()[:1]
	runValidateCases(t, []validateCase{
		{name: "missing", body: `{"messages":[{"role":"user","content":"hi"}]}`, anyWire: true,
			code: codec.CodeInvalidRequest, msg: "model: required"},
		{name: "upstream id", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, anyWire: true,
			code: codec.CodeInvalidRequest, msg: "model: must be one of kavi, vaani, mira or auto"},
		{name: "case matters", body: `{"model":"Kavi","messages":[{"role":"user","content":"hi"}]}`,
			code: codec.CodeInvalidRequest, msg: "model:"},
		{name: "tier not configured", body: `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`, tiers: kaviOnly,
			code: codec.CodeInvalidRequest, msg: "model:"},
		{name: "explicit tier", body: `{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`, anyWire: true,
			check: func(t *testing.T, p chatIntent) {
				require.NotNil(t, p.Tier)
				require.Equal(t, "kavi", p.Tier.Name)
				require.False(t, p.Auto)
			}},
		{name: "auto", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, anyWire: true,
			check: func(t *testing.T, p chatIntent) {
				require.Nil(t, p.Tier)
				require.True(t, p.Auto)
			}},
		{name: "allowlist refuses tier", body: `{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`, key: miraOnlyKey, anyWire: true,
			code: codec.CodeModelNotAllowed, msg: "model: this key may not use kavi"},
		{name: "allowlist admits tier", body: `{"model":"mira","messages":[{"role":"user","content":"hi"}]}`, key: miraOnlyKey},
		{name: "allowlisted key may use auto", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, key: miraOnlyKey,
			check: func(t *testing.T, p chatIntent) { require.True(t, p.Auto) }},
		{name: "auto with no allowed tier configured", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, key: miraOnlyKey, tiers: kaviOnly,
			code: codec.CodeModelNotAllowed, msg: "model:"},
	})
}

func TestValidateMessages(t *testing.T) {
	runValidateCases(t, []validateCase{
		{name: "missing", body: `{"model":"vaani"}`, anyWire: true,
			code: codec.CodeInvalidRequest, msg: "messages: required"},
		{name: "empty", body: messagesBody(`[]`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "messages: required"},
		{name: "developer role", body: messagesBody(`[{"role":"developer","content":"x"},{"role":"user","content":"hi"}]`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "messages[0].role: developer is not accepted"},
		{name: "unknown role", body: messagesBody(`[{"role":"user","content":"hi"},{"role":"function","content":"x"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[1].role: must be one of system, user, assistant or tool"},
		{name: "missing role", body: messagesBody(`[{"content":"hi"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].role: required"},
		{name: "system content array", body: messagesBody(`[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"hi"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content: must be a string on system messages"},
		{name: "system content null", body: messagesBody(`[{"role":"system","content":null}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "user content missing", body: messagesBody(`[{"role":"user"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content: must be a string or an array of content parts"},
		{name: "user content number", body: messagesBody(`[{"role":"user","content":42}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "user content object", body: messagesBody(`[{"role":"user","content":{"text":"hi"}}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "user empty string", body: messagesBody(`[{"role":"user","content":""}]`), anyWire: true},
		{name: "user content parts", body: messagesBody(`[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]}]`), anyWire: true},
		{name: "empty content parts", body: messagesBody(`[{"role":"user","content":[]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content: an array of content parts must not be empty"},
		{name: "unknown part type", body: messagesBody(`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio","input_audio":{}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content[1].type: must be text or image_url"},
		{name: "text part without text", body: messagesBody(`[{"role":"user","content":[{"type":"text"}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content[0].text: required"},
		{name: "text part with a number", body: messagesBody(`[{"role":"user","content":[{"type":"text","text":5}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "image part without url", body: messagesBody(`[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content[0].image_url.url: required"},
		{name: "part not an object", body: messagesBody(`[{"role":"user","content":["hi"]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "assistant null without tool calls", body: messagesBody(`[{"role":"user","content":"hi"},{"role":"assistant","content":null},{"role":"user","content":"?"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[1].content: must be a string on assistant messages, or null when the message has tool_calls"},
		{name: "assistant parts", body: messagesBody(`[{"role":"assistant","content":[{"type":"text","text":"x"}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content"},
		{name: "assistant tool call round trip", anyWire: true, body: `{"model":"kavi","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"messages":[` +
			`{"role":"user","content":"weather?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"tc-1","type":"function","function":{"name":"get_weather","arguments":"not even json"}}]},` +
			`{"role":"tool","tool_call_id":"tc-1","content":"sunny"},` +
			`{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"get_weather","arguments":""}}]},` +
			`{"role":"tool","tool_call_id":"x","name":"get_weather","content":""}]}`},
		{name: "assistant content beside tool calls", body: messagesBody(`[{"role":"assistant","content":"checking","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"ok"}]`)},
		{name: "tool without call id", body: messagesBody(`[{"role":"user","content":"hi"},{"role":"assistant","content":"x"},{"role":"tool","content":"sunny"}]`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "messages[2].tool_call_id: required on tool messages"},
		{name: "tool content array", body: messagesBody(`[{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"x"}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].content: must be a string on tool messages"},
		{name: "tool call id on user", body: messagesBody(`[{"role":"user","content":"hi","tool_call_id":"a"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].tool_call_id: only tool messages"},
		{name: "tool calls on user", body: messagesBody(`[{"role":"user","content":"hi","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].tool_calls: only assistant messages"},
		{name: "tool call without id", body: messagesBody(`[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].tool_calls[0].id: required"},
		{name: "tool call of another type", body: messagesBody(`[{"role":"assistant","tool_calls":[{"id":"a","type":"custom","function":{"name":"f","arguments":"{}"}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].tool_calls[0].type: must be function"},
		{name: "tool call without name", body: messagesBody(`[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"}}]}]`),
			code: codec.CodeInvalidRequest, msg: "messages[0].tool_calls[0].function.name: required"},
	})
}

func TestValidateFileIDs(t *testing.T) {
	withFiles := messagesBody(`[{"role":"user","content":"summarise","file_ids":["file-1"]}]`)
	runValidateCases(t, []validateCase{
		{name: "refused on the OpenAI route", body: withFiles, wire: chatOpenAI, pinned: true,
			code: codec.CodeInvalidRequest, msg: "messages[0].file_ids: file attachments are not accepted on /v1/chat/completions"},
		{name: "only on user messages", body: messagesBody(`[{"role":"user","content":"hi"},{"role":"assistant","content":"x","file_ids":["file-1"]}]`), pinned: true,
			code: codec.CodeInvalidRequest, msg: "messages[1].file_ids: only user messages"},
		{name: "unpinned", body: withFiles,
			code: codec.CodeInvalidRequest, msg: "Gateway-Version pin 2026-10-05", detail: codec.Detail{RequiredVersion: "2026-10-05"}},
		{name: "pinned too early", body: withFiles, wire: chatV2, pinned: true, version: codec.VersionChatFileIDs - 1,
			code: codec.CodeInvalidRequest, msg: "file_ids", detail: codec.Detail{RequiredVersion: "2026-10-05"}},
		{name: "key without files scope", body: withFiles, key: memoryKey, pinned: true, version: codec.VersionChatFileIDs,
			code: codec.CodeKeyScopeForbidden, msg: "file_ids", detail: codec.Detail{RequiredScope: "files"}},
		// Whether an id names a readable file is the file source's to say
		// (TestChatFileRefusalsBeforeUpstream); validation only marks the
		// request as attaching files.
		{name: "attaches files", body: withFiles, key: filesKey, pinned: true,
			check: func(t *testing.T, p chatIntent) { require.True(t, p.HasFiles) }},
		{name: "more than 20 files on a message", pinned: true, wire: chatV2,
			body: messagesBody(`[{"role":"user","content":"hi","file_ids":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17","18","19","20","21"]}]`),
			code: codec.CodeInvalidRequest, msg: "at most 20 files", detail: codec.Detail{Bound: "files_per_message", Limit: 20, HasLimit: true}},
		{name: "empty list names no file", body: messagesBody(`[{"role":"user","content":"hi","file_ids":[]}]`), anyWire: true,
			check: func(t *testing.T, p chatIntent) { require.False(t, p.HasFiles) }},
	})
}

func TestValidateMemoryAndRules(t *testing.T) {
	switches := func(recall, capture, rules bool) func(*testing.T, chatIntent) {
		return func(t *testing.T, p chatIntent) {
			require.Equal(t, [3]bool{recall, capture, rules}, [3]bool{p.MemoryRecall, p.MemoryCapture, p.Rules},
				"recall, capture, rules")
		}
	}
	runValidateCases(t, []validateCase{
		{name: "signed-in default on", body: chatBody(``), key: signedInKey, check: switches(true, true, true)},
		{name: "developer default off", body: chatBody(``), key: devKey, check: switches(false, false, false)},
		{name: "headless default off", body: chatBody(``), key: headlessKey, check: switches(false, false, false)},
		{name: "developer opts in", body: chatBody(`,"memory":{"recall":true,"capture":true},"rules":true`), key: devKey,
			check: switches(true, true, true)},
		{name: "signed-in opts out", body: chatBody(`,"memory":{"recall":false,"capture":false},"rules":false`), key: signedInKey, wire: chatV2,
			check: switches(false, false, false)},
		{name: "sides are independent", body: chatBody(`,"memory":{"recall":false}`), key: signedInKey,
			check: switches(false, true, true)},
		{name: "null side takes the default", body: chatBody(`,"memory":{"recall":null,"capture":false},"rules":null`), key: signedInKey,
			check: switches(true, false, true)},
		{name: "recall without memory scope", body: chatBody(`,"memory":{"recall":true}`), key: chatOnlyKey,
			code: codec.CodeKeyScopeForbidden, msg: "memory.recall", detail: codec.Detail{RequiredScope: "memory"}},
		{name: "capture without memory scope", body: chatBody(`,"memory":{"recall":false,"capture":true}`), key: chatOnlyKey, wire: chatV2,
			code: codec.CodeKeyScopeForbidden, msg: "memory.capture", detail: codec.Detail{RequiredScope: "memory"}},
		{name: "false needs no scope", body: chatBody(`,"memory":{"recall":false,"capture":false},"rules":false`), key: chatOnlyKey,
			check: switches(false, false, false)},
		{name: "signed-in default without the scopes is off", body: chatBody(``), key: chatOnlyKey,
			check: switches(false, false, false)},
		{name: "memory scope without rules scope", body: chatBody(`,"memory":{"recall":true,"capture":true}`), key: memoryKey,
			check: switches(true, true, false)},
		{name: "rules without rules scope", body: chatBody(`,"rules":true`), key: memoryKey,
			code: codec.CodeKeyScopeForbidden, msg: "rules", detail: codec.Detail{RequiredScope: "rules"}},
		{name: "ignored on the OpenAI route", body: chatBody(`,"memory":{"recall":true,"capture":true},"rules":true,"vault_id":"v1","mentioned_vault_ids":["a","b","c","d"]`),
			key: chatOnlyKey, wire: chatOpenAI, check: switches(false, false, false)},
		{name: "never on the OpenAI route", body: chatBody(``), key: signedInKey, wire: chatOpenAI, check: switches(false, false, false)},
		{name: "vault ids accepted", body: chatBody(`,"vault_id":"v1","mentioned_vault_ids":["a","b","c","d"]`)},
	})
}

func TestValidateNumbers(t *testing.T) {
	maxTokens := func(want int64) func(*testing.T, chatIntent) {
		return func(t *testing.T, p chatIntent) { require.Equal(t, want, p.MaxTokens) }
	}
	runValidateCases(t, []validateCase{
		{name: "temperature below 0", body: chatBody(`,"temperature":-0.1`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "temperature: must be a number from 0 to 2"},
		{name: "temperature above 2", body: chatBody(`,"temperature":2.01`),
			code: codec.CodeInvalidRequest, msg: "temperature"},
		{name: "temperature 0", body: chatBody(`,"temperature":0`)},
		{name: "temperature 2", body: chatBody(`,"temperature":2`)},
		{name: "top_p 0 is a real value", body: chatBody(`,"top_p":0`), wire: chatOpenAI},
		{name: "top_p 1", body: chatBody(`,"top_p":1`)},
		{name: "top_p above 1", body: chatBody(`,"top_p":1.5`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "top_p: must be a number from 0 to 1"},
		{name: "top_p negative", body: chatBody(`,"top_p":-0.5`),
			code: codec.CodeInvalidRequest, msg: "top_p"},
		{name: "max_tokens 0", body: chatBody(`,"max_tokens":0`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "max_tokens: must be at least 1"},
		{name: "max_tokens negative", body: chatBody(`,"max_tokens":-5`),
			code: codec.CodeInvalidRequest, msg: "max_tokens"},
		{name: "max_tokens 1", body: chatBody(`,"max_tokens":1`), check: maxTokens(1)},
		{name: "max_tokens clamped to the cap", body: chatBody(`,"max_tokens":100000`), check: maxTokens(4096)},
		{name: "max_tokens at the cap", body: chatBody(`,"max_tokens":4096`), check: maxTokens(4096)},
		{name: "unset max_tokens is the cap", body: `{"model":"kavi","messages":[{"role":"user","content":"hi"}]}`, check: maxTokens(8192)},
		{name: "mira cap", body: `{"model":"mira","max_tokens":3000,"messages":[{"role":"user","content":"hi"}]}`, check: maxTokens(2048)},
		{name: "auto unset is left for the router", body: `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`, check: maxTokens(0)},
		{name: "auto keeps the request", body: `{"model":"auto","max_tokens":100000,"messages":[{"role":"user","content":"hi"}]}`, check: maxTokens(100000)},
	})
}

func TestValidateEffort(t *testing.T) {
	effort := func(want hotpath.Effort, set bool) func(*testing.T, chatIntent) {
		return func(t *testing.T, p chatIntent) {
			require.Equal(t, want, p.Effort)
			require.Equal(t, set, p.EffortSet)
		}
	}
	runValidateCases(t, []validateCase{
		{name: "minimal", body: chatBody(`,"reasoning_effort":"minimal"`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "reasoning_effort: must be one of none, low, medium or high"},
		{name: "upper case", body: chatBody(`,"reasoning_effort":"HIGH"`),
			code: codec.CodeInvalidRequest, msg: "reasoning_effort"},
		{name: "empty", body: chatBody(`,"reasoning_effort":""`),
			code: codec.CodeInvalidRequest, msg: "reasoning_effort"},
		{name: "none", body: chatBody(`,"reasoning_effort":"none"`), check: effort(hotpath.EffortNone, true)},
		{name: "high", body: chatBody(`,"reasoning_effort":"high"`), wire: chatOpenAI, check: effort(hotpath.EffortHigh, true)},
		{name: "absent", body: chatBody(``), check: effort("", false)},
		{name: "null is absent", body: chatBody(`,"reasoning_effort":null`), check: effort("", false)},
	})
}

func TestValidateTools(t *testing.T) {
	hasTools := func(t *testing.T, p chatIntent) { require.True(t, p.HasTools) }
	bound := func(name string, limit int64) codec.Detail {
		return codec.Detail{Bound: name, Limit: limit, HasLimit: true}
	}
	runValidateCases(t, []validateCase{
		{name: "function tool", body: toolsBody(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`), anyWire: true, check: hasTools},
		{name: "no parameters", body: chatBody(`,"tools":[{"type":"function","function":{"name":"now","description":"time"}}]`), check: hasTools},
		{name: "null parameters", body: toolsBody(`null`), check: hasTools},
		{name: "no tools", body: chatBody(``), check: func(t *testing.T, p chatIntent) { require.False(t, p.HasTools) }},
		{name: "other type", body: chatBody(`,"tools":[{"type":"retrieval","function":{"name":"f"}}]`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "tools[0].type: must be function"},
		{name: "missing name", body: chatBody(`,"tools":[{"type":"function","function":{}}]`),
			code: codec.CodeInvalidRequest, msg: "tools[0].function.name: required"},
		{name: "name with a space", body: chatBody(`,"tools":[{"type":"function","function":{"name":"get weather"}}]`),
			code: codec.CodeInvalidRequest, msg: "tools[0].function.name"},
		{name: "name of 65 characters", body: chatBody(`,"tools":[{"type":"function","function":{"name":"` + strings.Repeat("a", 65) + `"}}]`),
			code: codec.CodeInvalidRequest, msg: "tools[0].function.name"},
		{name: "name of 64 characters", body: chatBody(`,"tools":[{"type":"function","function":{"name":"` + strings.Repeat("a", 63) + `-"}}]`), check: hasTools},
		{name: "duplicate names", body: chatBody(`,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}},{"type":"function","function":{"name":"f"}}]`),
			code: codec.CodeInvalidRequest, msg: "tools[2].function.name: f is already declared by tools[0]"},
		{name: "parameters an array", body: toolsBody(`[{"type":"string"}]`), anyWire: true,
			code: codec.CodeInvalidToolSchema, msg: "tools[0].function.parameters of get_weather: must be a JSON Schema object"},
		{name: "parameters a string", body: toolsBody(`"object"`),
			code: codec.CodeInvalidToolSchema, msg: "get_weather"},
		{name: "parameters over 16 KiB", body: toolsBody(`{"description":"` + strings.Repeat("x", 16<<10) + `"}`),
			code: codec.CodeInvalidToolSchema, msg: "get_weather: exceeds the bound of 16384 bytes", detail: bound("bytes", 16384)},
		{name: "parameters of exactly 16 KiB", body: toolsBody(`{"description":"` + strings.Repeat("x", 16<<10-18) + `"}`), check: hasTools},
		{name: "parameters 13 deep", body: toolsBody(nested(13)),
			code: codec.CodeInvalidToolSchema, msg: "get_weather: nesting exceeds the bound of depth 12", detail: bound("depth", 12)},
		{name: "parameters 12 deep", body: toolsBody(nested(12)), check: hasTools},
		{name: "parameters of 1001 values", body: toolsBody(manyNodes(1001)),
			code: codec.CodeInvalidToolSchema, msg: "get_weather: exceeds the bound of 1000 JSON values", detail: bound("nodes", 1000)},
		{name: "parameters of 1000 values", body: toolsBody(manyNodes(1000)), check: hasTools},
		{name: "second tool named", body: chatBody(`,"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b","parameters":[]}}]`),
			code: codec.CodeInvalidToolSchema, msg: "tools[1].function.parameters of b"},
	})
}

func TestValidateToolChoice(t *testing.T) {
	withTool := func(choice string) string {
		return chatBody(`,"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":` + choice)
	}
	runValidateCases(t, []validateCase{
		{name: "absent", body: chatBody(``)},
		{name: "null", body: chatBody(`,"tool_choice":null`)},
		{name: "none without tools", body: chatBody(`,"tool_choice":"none"`), anyWire: true},
		{name: "auto without tools", body: chatBody(`,"tool_choice":"auto"`)},
		{name: "auto", body: withTool(`"auto"`)},
		{name: "escaped spelling", body: withTool(`"\u0061uto"`)},
		{name: "required", body: withTool(`"required"`), anyWire: true},
		{name: "required without tools", body: chatBody(`,"tool_choice":"required"`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: `tool_choice: "required" needs at least one tool`},
		{name: "unknown string", body: withTool(`"any"`),
			code: codec.CodeInvalidRequest, msg: "tool_choice: must be"},
		{name: "number", body: withTool(`1`),
			code: codec.CodeInvalidRequest, msg: "tool_choice: must be"},
		{name: "declared function", body: withTool(`{"type":"function","function":{"name":"get_weather"}}`), anyWire: true},
		{name: "undeclared function", body: withTool(`{"type":"function","function":{"name":"send_mail"}}`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "tool_choice.function.name: names a function that is not declared in tools"},
		{name: "function without tools", body: chatBody(`,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`),
			code: codec.CodeInvalidRequest, msg: "tool_choice.function.name"},
		{name: "object of another type", body: withTool(`{"type":"tool","function":{"name":"get_weather"}}`),
			code: codec.CodeInvalidRequest, msg: "tool_choice: must be"},
		{name: "object without a name", body: withTool(`{"type":"function"}`),
			code: codec.CodeInvalidRequest, msg: "tool_choice: must be"},
	})
}

func TestValidateResponseFormat(t *testing.T) {
	compiled := func(t *testing.T, p chatIntent) {
		require.NotNil(t, p.Schema)
		require.False(t, p.JSONObject)
	}
	invalidSchema := func(name, schema, msg string) validateCase {
		return validateCase{name: name, body: schemaBody(schema), code: codec.CodeInvalidSchema, msg: msg}
	}
	cases := []validateCase{
		{name: "text", body: chatBody(`,"response_format":{"type":"text"}`), anyWire: true,
			check: func(t *testing.T, p chatIntent) { require.Nil(t, p.Schema); require.False(t, p.JSONObject) }},
		{name: "json_object", body: chatBody(`,"response_format":{"type":"json_object"}`), anyWire: true,
			check: func(t *testing.T, p chatIntent) { require.Nil(t, p.Schema); require.True(t, p.JSONObject) }},
		{name: "json_schema", body: schemaBody(`{"type":"object","properties":{"answer":{"type":"string"},"score":{"type":"number","minimum":0}},"required":["answer"],"additionalProperties":false}`),
			anyWire: true, check: compiled},
		{name: "json_schema with refs", body: schemaBody(`{"$defs":{"item":{"type":"string"}},"definitions":{"n":{"type":"integer"}},"type":"object","properties":{"a":{"$ref":"#/$defs/item"},"b":{"$ref":"#/definitions/n"},"c":{"type":["string","null"],"nullable":true}}}`),
			check: compiled},
		{name: "unknown type", body: chatBody(`,"response_format":{"type":"xml"}`), anyWire: true,
			code: codec.CodeInvalidRequest, msg: "response_format.type: must be text, json_object or json_schema"},
		{name: "missing type", body: chatBody(`,"response_format":{}`),
			code: codec.CodeInvalidRequest, msg: "response_format.type"},
		{name: "json_schema missing", body: chatBody(`,"response_format":{"type":"json_schema"}`),
			code: codec.CodeInvalidRequest, msg: "response_format.json_schema: required"},
		{name: "name missing", body: chatBody(`,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}`),
			code: codec.CodeInvalidRequest, msg: "response_format.json_schema.name: required"},
		{name: "name with a dot", body: chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"a.b","schema":{"type":"object"}}}`),
			code: codec.CodeInvalidRequest, msg: "response_format.json_schema.name"},
		{name: "schema missing", body: chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"a"}}`),
			code: codec.CodeInvalidRequest, msg: "response_format.json_schema.schema: required"},
		invalidSchema("schema an array", `[{"type":"object"}]`, "must be a JSON Schema object"),
		invalidSchema("schema malformed", `{"type":5}`, "at /type:"),
		invalidSchema("schema with if", `{"type":"object","if":{"required":["a"]},"then":{"required":["b"]}}`, `keyword "if" at the top level is not supported`),
		invalidSchema("schema with $dynamicRef", `{"$dynamicRef":"#node"}`, `keyword "$dynamicRef"`),
		invalidSchema("schema with unevaluatedProperties", `{"type":"object","unevaluatedProperties":false}`, `keyword "unevaluatedProperties"`),
		invalidSchema("schema with dependentSchemas", `{"type":"object","dependentSchemas":{"a":{}}}`, `keyword "dependentSchemas"`),
		invalidSchema("schema with contentEncoding", `{"type":"string","contentEncoding":"base64"}`, `keyword "contentEncoding"`),
		invalidSchema("unsupported keyword deep inside", `{"type":"object","properties":{"a~b":{"type":"array","items":{"anyOf":[{"type":"string"},{"not":{}}]}}}}`,
			`keyword "not" at /properties/a~0b/items/anyOf/1 is not supported`),
		invalidSchema("unsupported keyword under $defs", `{"$defs":{"x":{"contains":{}}}}`, `keyword "contains" at /$defs/x`),
		invalidSchema("external $ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}}}`, "only references inside the schema are supported"),
		invalidSchema("file $ref", `{"$ref":"file:///etc/passwd"}`, "only references inside the schema are supported"),
		invalidSchema("relative $ref", `{"$ref":"other.json"}`, "only references inside the schema are supported"),
		invalidSchema("dangling $ref", `{"$ref":"#/$defs/missing"}`, "$ref"),
		invalidSchema("pattern with lookahead", `{"type":"string","pattern":"^(?=a)"}`, "at /pattern: '^(?=a)' is not valid regex"),
		invalidSchema("$dynamicRef is not on the list", `{"$dynamicRef":"#node","type":"object"}`, `keyword "$dynamicRef"`),
		{name: "schema over 32 KiB", body: schemaBody(`{"description":"` + strings.Repeat("x", 32<<10) + `"}`),
			code: codec.CodeInvalidSchema, msg: "exceeds the bound of 32768 bytes", detail: codec.Detail{Bound: "bytes", Limit: 32768, HasLimit: true}},
		{name: "schema 17 deep", body: schemaBody(nestedSchema(17)),
			code: codec.CodeInvalidSchema, msg: "nesting exceeds the bound of depth 16", detail: codec.Detail{Bound: "depth", Limit: 16, HasLimit: true}},
		{name: "schema 16 deep", body: schemaBody(nestedSchema(16)), check: compiled},
	}
	runValidateCases(t, cases)
}

// TestValidateOrder sends requests with two faults each: the one earlier in
// the fixed order is the one answered.
func TestValidateOrder(t *testing.T) {
	runValidateCases(t, []validateCase{
		{name: "model before messages", body: `{"model":"gpt-4o","messages":[]}`,
			code: codec.CodeInvalidRequest, msg: "model:"},
		{name: "messages before file_ids", body: messagesBody(`[{"role":"user","content":"a","file_ids":["f"]},{"role":"tool","content":"x"}]`),
			code: codec.CodeInvalidRequest, msg: "messages[1].tool_call_id"},
		{name: "file_ids before memory", body: `{"model":"vaani","memory":{"recall":true},"messages":[{"role":"user","content":"a","file_ids":["f"]}]}`, key: chatOnlyKey,
			code: codec.CodeInvalidRequest, msg: "file_ids", detail: codec.Detail{RequiredVersion: "2026-10-05"}},
		{name: "memory before numbers", body: chatBody(`,"memory":{"capture":true},"temperature":9`), key: chatOnlyKey,
			code: codec.CodeKeyScopeForbidden, msg: "memory.capture", detail: codec.Detail{RequiredScope: "memory"}},
		{name: "numbers before effort", body: chatBody(`,"max_tokens":0,"reasoning_effort":"minimal"`),
			code: codec.CodeInvalidRequest, msg: "max_tokens"},
		{name: "effort before tools", body: chatBody(`,"reasoning_effort":"minimal","tools":[{"type":"x"}]`),
			code: codec.CodeInvalidRequest, msg: "reasoning_effort"},
		{name: "tools before tool_choice", body: chatBody(`,"tools":[{"type":"x"}],"tool_choice":"required"`),
			code: codec.CodeInvalidRequest, msg: "tools[0].type"},
		{name: "tool_choice before response_format", body: chatBody(`,"tool_choice":"required","response_format":{"type":"xml"}`),
			code: codec.CodeInvalidRequest, msg: "tool_choice"},
		{name: "model_not_allowed before messages", body: `{"model":"kavi","messages":[]}`, key: miraOnlyKey,
			code: codec.CodeModelNotAllowed},
	})
}

// TestIgnoredOpenAIFields decodes a body carrying every OpenAI field the
// route ignores, and others it has never heard of, and validates it.
func TestIgnoredOpenAIFields(t *testing.T) {
	body := `{
		"model": "mira",
		"messages": [
			{"role": "system", "content": "You are terse."},
			{"role": "user", "content": "Say hi.", "name": "sam"}
		],
		"n": 3,
		"stop": ["\n", "END"],
		"seed": 42,
		"presence_penalty": 0.5,
		"frequency_penalty": -0.5,
		"logit_bias": {"50256": -100},
		"logprobs": true,
		"top_logprobs": 5,
		"user": "user-1234",
		"max_completion_tokens": 99,
		"parallel_tool_calls": false,
		"service_tier": "auto",
		"store": false,
		"metadata": {"a": "b"},
		"modalities": ["text"],
		"prediction": {"type": "content", "content": "hi"},
		"web_search_options": {},
		"some_future_field": {"nested": [1, 2, {"x": null}]},
		"stream": true,
		"stream_options": {"include_usage": true}
	}`
	for _, wire := range []chatWire{chatOpenAI, chatV1, chatV2} {
		t.Run([...]string{"", "v1", "v2", "openai"}[wire], func(t *testing.T) {
			req := decodeChat(t, body)
			require.True(t, req.Stream)
			require.NotNil(t, req.StreamOptions)
			require.True(t, req.StreamOptions.IncludeUsage)
			require.Nil(t, req.MaxTokens, "max_completion_tokens is not max_tokens")
			intent, cerr := validateChat(req, wire, hotpath.DefaultTiers(), devKey, codec.CurrentVersion, false)
			require.Nil(t, cerr)
			require.Equal(t, "mira", intent.Tier.Name)
			require.Equal(t, int64(2048), intent.MaxTokens)
		})
	}
}

func TestCheckStructuredSupport(t *testing.T) {
	tier := &hotpath.DefaultTiers()[2]
	schema, cerr := compileSchema([]byte(`{"type":"object"}`))
	require.Nil(t, cerr)
	for _, tc := range []struct {
		name     string
		tier     *hotpath.Tier
		supports bool
		intent   chatIntent
		refused  bool
	}{
		{name: "schema on a tier without constrained decoding", tier: tier, intent: chatIntent{Schema: schema}, refused: true},
		{name: "json_object on a tier without constrained decoding", tier: tier, intent: chatIntent{JSONObject: true}, refused: true},
		{name: "unknown tier", intent: chatIntent{JSONObject: true}, refused: true},
		{name: "schema on a tier with it", tier: tier, supports: true, intent: chatIntent{Schema: schema}},
		{name: "text on a tier without it", tier: tier, intent: chatIntent{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr := checkStructuredSupport(tc.tier, tc.supports, tc.intent)
			if !tc.refused {
				require.Nil(t, cerr)
				return
			}
			require.NotNil(t, cerr)
			require.Equal(t, codec.CodeStructuredOutputUnsupported, cerr.Code)
			require.Equal(t, 422, cerr.Status())
			require.Contains(t, cerr.Message, "response_format")
			if tc.tier != nil {
				require.Contains(t, cerr.Message, tc.tier.Name)
			}
		})
	}
}

func TestJSONShape(t *testing.T) {
	f := func(in string, maxDepth, maxNodes, want int) {
		t.Helper()
		require.Equal(t, want, jsonShape([]byte(in), maxDepth, maxNodes), "input: %s", in)
	}
	f(`{}`, 1, 1, shapeOK)
	f(`{}`, 0, 1, shapeTooDeep)
	f(`{"a":1}`, 1, 2, shapeOK)
	f(`{"a":1}`, 1, 1, shapeTooMany)
	f(`{"a" : "b:c", "d":[true,false,null,-1.5e3]}`, 2, 7, shapeOK)
	f(`{"a" : "b:c", "d":[true,false,null,-1.5e3]}`, 2, 6, shapeTooMany)
	f(`{"a\"":"\\","b":{"c":[[]]}}`, 4, 6, shapeOK)
	f(`{"a\"":"\\","b":{"c":[[]]}}`, 3, 6, shapeTooDeep)
	f(`{ "k" :{ "k2" : "v" } }`, 2, 3, shapeOK)
	f(`{ "k" :{ "k2" : "v" } }`, 2, 2, shapeTooMany)
}

func BenchmarkValidateChat(b *testing.B) {
	req := decodeChat(b, typicalChat)
	tiers := hotpath.DefaultTiers()
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalChat)))
	for b.Loop() {
		if _, cerr := validateChat(req, chatV1, tiers, signedInKey, codec.CurrentVersion, false); cerr != nil {
			b.Fatal(cerr)
		}
	}
}

// typicalChat is a three-message request with the usual options and one tool.
const typicalChat = `{
	"model": "vaani",
	"messages": [
		{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
		{"role": "user", "content": "What's the weather like in Pune today?"},
		{"role": "assistant", "content": "Let me check that for you."}
	],
	"temperature": 0.7,
	"top_p": 0.9,
	"max_tokens": 1024,
	"reasoning_effort": "low",
	"stream": true,
	"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}],
	"tool_choice": "auto",
	"memory": {"recall": true, "capture": false}
}`

// TestValidateChatAllocations holds a plain request to zero allocations.
// It leaves out tools: their parameters are checked with encoding/json's
// pooled scanner, and the race detector empties pools at random.
func TestValidateChatAllocations(t *testing.T) {
	req := decodeChat(t, typicalChat)
	req.Tools, req.ToolChoice = nil, nil
	tiers := hotpath.DefaultTiers()
	allocs := testing.AllocsPerRun(100, func() {
		if _, cerr := validateChat(req, chatV2, tiers, signedInKey, codec.CurrentVersion, true); cerr != nil {
			t.Fatal(cerr)
		}
	})
	require.Zero(t, allocs)
}
