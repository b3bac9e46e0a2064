package codec

import (
	"strings"
	"testing"
)

var wireSeeds = []string{
	`{"model":"mira","max_tokens":64,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"vaani","max_tokens":64,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},` +
		`"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"tool_use","id":"c1","name":"f","input":{"a":1}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"r"}],"is_error":true},{"type":"text","text":"go"}]}]}`,
	`{"model":"kavi","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"?"}]}]}`,
	`{"model":"mira","input":"hi","instructions":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}}}`,
	`{"model":"mira","input":[{"role":"developer","content":"d"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"https://x/y.png"}]},` +
		`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`,
	`{"model":"mira","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}],"reasoning":{"effort":"minimal"},"store":false}`,
}

// FuzzWireRequests: any body either decodes into a chat request whose
// messages are each valid JSON in the chat shape, or is refused as
// invalid_request with a message — never a panic, never a half-built
// request passed on.
func FuzzWireRequests(f *testing.F) {
	for _, s := range wireSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		check := func(out *ChatRequest, e *Error) {
			if e != nil {
				if e.Code != CodeInvalidRequest || e.Message == "" {
					t.Fatalf("refusal %v is not a clear invalid_request", e)
				}
				return
			}
			if len(out.Messages) == 0 {
				t.Fatal("accepted a request with no messages")
			}
			for _, m := range out.Messages {
				if len(m.Content) > 0 && !validJSON(m.Content) {
					t.Fatalf("message content %q is not JSON", m.Content)
				}
				if m.Role == "tool" && m.ToolCallID == "" {
					t.Fatal("a tool message without tool_call_id")
				}
			}
			if len(out.ToolChoice) > 0 && !validJSON(out.ToolChoice) {
				t.Fatalf("tool_choice %q is not JSON", out.ToolChoice)
			}
		}
		var ar MessagesRequest
		var out ChatRequest
		if e := DecodeRequest([]byte(body), &ar); e == nil {
			check(&out, ar.ToChat(&out, false))
			check(&out, ar.ToChat(&out, true))
		}
		var rr ResponsesRequest
		if e := DecodeRequest([]byte(body), &rr); e == nil {
			check(&out, rr.ToChat(&out))
		}
	})
}

func validJSON(b []byte) bool {
	var v any
	return strictJSON.Unmarshal(b, &v) == nil
}

// Every seed is accepted by the decoder it was written for: the fuzz
// corpus starts from valid requests.
func TestWireSeedsAreValid(t *testing.T) {
	for _, s := range wireSeeds {
		var out ChatRequest
		if !strings.Contains(s, `"max_tokens"`) {
			var r ResponsesRequest
			if e := DecodeRequest([]byte(s), &r); e != nil {
				t.Fatal(e)
			}
			if e := r.ToChat(&out); e != nil {
				t.Fatalf("%s: %v", s, e)
			}
			continue
		}
		var r MessagesRequest
		if e := DecodeRequest([]byte(s), &r); e != nil {
			t.Fatal(e)
		}
		if e := r.ToChat(&out, false); e != nil {
			t.Fatalf("%s: %v", s, e)
		}
	}
}
