package control

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/edgegw/gateway/hotpath"
)

// assess checks one assertion other than judge against a reply. Reasons
// quote the expectation, never the reply (the result shows the reply).
func (r *EvalRunner) assess(as *evalAssertion, res *hotpath.TurnResult) evalVerdictJSON {
	v := evalVerdictJSON{Type: as.Type}
	text := res.Content
	switch as.Type {
	case "equals":
		v.Passed = strings.TrimSpace(text) == *as.Value
		v.Reason = verdictText(v.Passed, "the reply equals "+strconv.Quote(*as.Value), "the reply does not equal "+strconv.Quote(*as.Value))
	case "contains", "not_contains":
		hay, needle := text, *as.Value
		if as.IgnoreCase {
			hay, needle = strings.ToLower(hay), strings.ToLower(needle)
		}
		found := strings.Contains(hay, needle)
		v.Passed = found == (as.Type == "contains")
		v.Reason = verdictText(found, "the reply contains "+strconv.Quote(*as.Value), "the reply does not contain "+strconv.Quote(*as.Value))
	case "regex":
		re, err := regexp.Compile(as.Pattern)
		if err != nil {
			v.Reason = "the pattern does not compile"
			break
		}
		v.Passed = re.MatchString(text)
		v.Reason = verdictText(v.Passed, "the reply matches the pattern", "the reply does not match the pattern")
	case "json_schema":
		s, cerr := r.Chat.CompileSchema(as.Schema)
		if cerr != nil {
			v.Reason = "the schema does not compile"
			break
		}
		if cerr := s.Check([]byte(text)); cerr != nil {
			v.Reason = cerr.Message
			break
		}
		v.Passed, v.Reason = true, "the reply is JSON valid against the schema"
	case "tool_call":
		v = assessToolCall(r, as, res.ToolCalls)
	default:
		v.Reason = "unknown assertion type"
	}
	return v
}

func verdictText(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// assessToolCall passes when some call names the function and, with an
// arguments schema, its arguments satisfy it.
func assessToolCall(r *EvalRunner, as *evalAssertion, raw []byte) evalVerdictJSON {
	v := evalVerdictJSON{Type: as.Type}
	var calls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &calls)
	}
	var s OutputSchema
	if len(as.Arguments) > 0 {
		var cerr error
		if s, cerr = compileOrNil(r, as.Arguments); cerr != nil {
			v.Reason = "the arguments schema does not compile"
			return v
		}
	}
	why := "the reply calls no function " + strconv.Quote(as.Name)
	for _, c := range calls {
		if c.Function.Name != as.Name {
			continue
		}
		if s != nil {
			if cerr := s.Check([]byte(c.Function.Arguments)); cerr != nil {
				why = "the arguments of " + strconv.Quote(as.Name) + ": " + cerr.Message
				continue
			}
		}
		v.Passed, v.Reason = true, "the reply calls "+strconv.Quote(as.Name)
		return v
	}
	v.Reason = why
	return v
}

func compileOrNil(r *EvalRunner, raw json.RawMessage) (OutputSchema, error) {
	s, cerr := r.Chat.CompileSchema(raw)
	if cerr != nil {
		return nil, cerr
	}
	return s, nil
}

// judgeSystem instructs a judge tier.
const judgeSystem = "You grade a model's reply against a rubric. Read the conversation's last user message, " +
	"the reply and the rubric. Answer only with JSON: {\"pass\": true or false, \"reason\": one sentence}."

// judgeFormat asks for the verdict as structured output.
var judgeFormat = json.RawMessage(`{"type":"json_schema","json_schema":{"name":"verdict","strict":true,"schema":` +
	`{"type":"object","properties":{"pass":{"type":"boolean"},"reason":{"type":"string"}},` +
	`"required":["pass","reason"],"additionalProperties":false}}}`)

// judgeBody is the chat request that asks tier to grade res against
// rubric. The rubric comes last.
func judgeBody(tier string, ec *evalCase, res *hotpath.TurnResult, rubric string) []byte {
	reply := res.Content
	if len(res.ToolCalls) > 0 {
		reply += "\n(tool calls) " + string(res.ToolCalls)
	}
	prompt := "Last user message:\n" + lastUserText(ec.Messages) + "\n\nReply:\n" + reply + "\n\nRubric:\n" + rubric
	msgs, _ := json.Marshal([]map[string]string{{"role": "system", "content": judgeSystem}, {"role": "user", "content": prompt}})
	jc := evalCase{Messages: msgs, ResponseFormat: judgeFormat}
	return jc.chatBody(tier)
}

// lastUserText is the text of the last user message (string content, or
// the text parts of an array).
func lastUserText(raw json.RawMessage) string {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &msgs)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(msgs[i].Content, &s) == nil {
			return s
		}
		var parts []struct {
			Type, Text string
		}
		_ = json.Unmarshal(msgs[i].Content, &parts)
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

// judgeVerdict reads the judge's JSON answer.
func judgeVerdict(content string) evalVerdictJSON {
	var v struct {
		Pass   *bool  `json:"pass"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(content), &v); err != nil || v.Pass == nil {
		return evalVerdictJSON{Type: "judge", Reason: "the judge's answer was not a verdict"}
	}
	return evalVerdictJSON{Type: "judge", Passed: *v.Pass, Reason: v.Reason}
}
