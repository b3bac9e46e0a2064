package load

import (
	"sort"
	"strconv"
	"strings"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// hostileBodies build the hostile requests a scenario may mix into its
// traffic, by kind: each is one of the inputs that once cost a gateway
// seconds of CPU, hundreds of MiB, or a wrong answer. Every one must be
// refused (or, for long_word, answered) at little cost to the ordinary
// requests beside it.
var hostileBodies = map[string]func(tier string) []byte{
	// One unbroken 280 KB word: quadratic to tokenize without a run bound.
	"long_word": func(tier string) []byte {
		return chatJSON(tier, strings.Repeat("a", 280<<10), "")
	},
	// The same length of letters drawn at random (a fixed seed): no part
	// repeats, so each is encoded, until the count passes the tier's
	// window and the request is refused as context_overflow.
	"random_word": func(tier string) []byte {
		return chatJSON(tier, string(tokens.AppendLetters(nil, 280, 280<<10)), "")
	},
	// 2 MiB of words, over every window: refused as context_overflow.
	"overflow": func(tier string) []byte {
		return chatJSON(tier, string(tokens.AppendWords(nil, 1, 400_000)), "")
	},
	// 20000 tools: a quadratic duplicate check, refused at 128.
	"many_tools": func(tier string) []byte {
		var sb strings.Builder
		sb.WriteString(`,"tools":[`)
		for i := range 20_000 {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"type":"function","function":{"name":"f` + strconv.Itoa(i) + `"}}`)
		}
		sb.WriteString(`]`)
		return chatJSON(tier, "hi", sb.String())
	},
	// An invalid escape in content: the client's 400, never sent upstream.
	"bad_escape": func(tier string) []byte {
		return []byte(`{"model":"` + tier + `","messages":[{"role":"user","content":"\x41"}]}`)
	},
	// A type error: the client's 400 naming the field.
	"type_error": func(tier string) []byte { return chatJSON(tier, "hi", `,"max_tokens":"100"`) },
	// A schema that refers to itself without end.
	"ref_cycle": func(tier string) []byte {
		return chatJSON(tier, "hi", `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#"}}}`)
	},
	// A tool schema asking the simulator for a gigabyte string.
	"min_length": func(tier string) []byte {
		return chatJSON(tier, "hi", `,"tools":[{"type":"function","function":{"name":"f","parameters":`+
			`{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1000000000}}}}}],"tool_choice":"required"`)
	},
}

// HostileKinds lists the hostile request kinds a scenario may weight.
func HostileKinds() []string {
	kinds := make([]string, 0, len(hostileBodies))
	for k := range hostileBodies {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

func hostileBody(kind, tier string) []byte { return hostileBodies[kind](tier) }

// chatJSON is a one-message chat body with extra fields appended.
func chatJSON(tier, content, extra string) []byte {
	b := append([]byte(`{"model":`), codec.AppendJSONString(nil, tier)...)
	b = append(b, `,"messages":[{"role":"user","content":`...)
	b = codec.AppendJSONString(b, content)
	b = append(b, `}]`...)
	b = append(b, extra...)
	return append(b, '}')
}
