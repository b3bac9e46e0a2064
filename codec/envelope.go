package codec

import (
	"strconv"
	"time"
)

// AppendV1Error appends the gateway's own error envelope for e to dst:
//
//	{"code":"rate_limited","error":"Too many requests; retry later.","request_id":"…",…}
//
// followed by the detail fields that are set, in this order: required_scope,
// required_version, reason, error_description, file_id, filename, bound,
// limit, tokens, reset_at, mira_available, vision_tiers. The request id is
// always written, as "" when empty. A nil e is written as ErrInternal.
// Detail.RetryAfter is not written.
func AppendV1Error(dst []byte, e *Error, requestID []byte) []byte {
	if e == nil {
		e = ErrInternal
	}
	dst = append(dst, `{"code":"`...)
	dst = append(dst, e.Code.String()...) // slugs need no escaping
	dst = append(dst, `","error":`...)
	dst = AppendJSONString(dst, e.message())
	dst = append(dst, `,"request_id":`...)
	dst = AppendJSONBytes(dst, requestID)

	d := &e.Detail
	dst = appendStringField(dst, `,"required_scope":`, d.RequiredScope)
	dst = appendStringField(dst, `,"required_version":`, d.RequiredVersion)
	dst = appendStringField(dst, `,"reason":`, d.Reason)
	dst = appendStringField(dst, `,"error_description":`, d.ErrorDescription)
	dst = appendStringField(dst, `,"file_id":`, d.FileID)
	dst = appendStringField(dst, `,"filename":`, d.Filename)
	dst = appendStringField(dst, `,"bound":`, d.Bound)
	if d.HasLimit {
		dst = append(dst, `,"limit":`...)
		dst = strconv.AppendInt(dst, d.Limit, 10)
	}
	if d.HasTokens {
		dst = append(dst, `,"tokens":`...)
		dst = strconv.AppendInt(dst, d.Tokens, 10)
	}
	if d.ResetAt != 0 {
		dst = append(dst, `,"reset_at":"`...)
		dst = time.Unix(d.ResetAt, 0).UTC().AppendFormat(dst, time.RFC3339)
		dst = append(dst, '"')
	}
	if d.MiraAvailable != 0 {
		dst = append(dst, `,"mira_available":`...)
		dst = strconv.AppendBool(dst, d.MiraAvailable > 0)
	}
	if len(d.VisionTiers) > 0 {
		dst = append(dst, `,"vision_tiers":[`...)
		for i, tier := range d.VisionTiers {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, tier)
		}
		dst = append(dst, ']')
	}
	if len(d.Categories) > 0 {
		dst = append(dst, `,"categories":[`...)
		for i, c := range d.Categories {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, c)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// AppendOpenAIError appends an OpenAI-compatible error body for e to dst:
//
//	{"error":{"message":"…","type":"rate_limit_error","param":null,"code":"rate_limited"}}
//
// Details and the request id are not written. A nil e is written as
// ErrInternal.
func AppendOpenAIError(dst []byte, e *Error) []byte {
	if e == nil {
		e = ErrInternal
	}
	dst = append(dst, `{"error":{"message":`...)
	dst = AppendJSONString(dst, e.message())
	dst = append(dst, `,"type":"`...)
	dst = append(dst, e.Code.OpenAIType()...)
	dst = append(dst, `","param":null,"code":"`...)
	dst = append(dst, e.Code.String()...)
	return append(dst, `"}}`...)
}

// appendStringField appends prefix and the quoted value when value is non-empty.
func appendStringField(dst []byte, prefix, value string) []byte {
	if value == "" {
		return dst
	}
	dst = append(dst, prefix...)
	return AppendJSONString(dst, value)
}
