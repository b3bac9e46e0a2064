package codec

import "strconv"

// MemorySignal is one recalled or captured memory as a response reports
// it: scope and key, and for a vault-scope memory its vault (VaultName
// when it resolves). Never the value.
type MemorySignal struct {
	Scope, Key, VaultID, VaultName string
}

// AppendRecallField appends `,"memory_recall":[…]`, one object per
// recalled memory.
func AppendRecallField(dst []byte, recalled []MemorySignal) []byte {
	dst = append(dst, `,"memory_recall":[`...)
	for i := range recalled {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendMemorySignal(dst, &recalled[i])
	}
	return append(dst, ']')
}

// AppendRulesField appends `,"rules_applied":{"count":N,"rulesets":[…]}`:
// how many rules applied and which rulesets ("org", "vault") contributed.
func AppendRulesField(dst []byte, count int, rulesets []string) []byte {
	dst = append(dst, `,"rules_applied":{"count":`...)
	dst = strconv.AppendInt(dst, int64(count), 10)
	dst = append(dst, `,"rulesets":[`...)
	for i, r := range rulesets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendJSONString(dst, r)
	}
	return append(dst, "]}"...)
}

// AppendCaptureField appends `,"memory_capture":{"count":N,"memories":[…]}`
// for the memories a turn stored.
func AppendCaptureField(dst []byte, captured []MemorySignal) []byte {
	dst = append(dst, `,"memory_capture":{"count":`...)
	dst = strconv.AppendInt(dst, int64(len(captured)), 10)
	dst = append(dst, `,"memories":[`...)
	for i := range captured {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendMemorySignal(dst, &captured[i])
	}
	return append(dst, "]}"...)
}

func appendMemorySignal(dst []byte, s *MemorySignal) []byte {
	dst = append(dst, `{"scope":`...)
	dst = AppendJSONString(dst, s.Scope)
	dst = append(dst, `,"key":`...)
	dst = AppendJSONString(dst, s.Key)
	if s.VaultID != "" {
		dst = append(dst, `,"vault_id":`...)
		dst = AppendJSONString(dst, s.VaultID)
		if s.VaultName != "" {
			dst = append(dst, `,"vault_name":`...)
			dst = AppendJSONString(dst, s.VaultName)
		}
	}
	return append(dst, '}')
}

// SpliceFields inserts fields (a run of `,"name":value` pairs) into the
// JSON object that ends tail bytes before the end of frame: before its
// closing brace. A frame that is not such an object is returned as it is.
func SpliceFields(frame []byte, tail int, fields []byte) []byte {
	at := len(frame) - tail - 1
	if len(fields) == 0 || at < 0 || frame[at] != '}' {
		return frame
	}
	end := append([]byte(nil), frame[at:]...)
	frame = append(frame[:at], fields...)
	return append(frame, end...)
}
