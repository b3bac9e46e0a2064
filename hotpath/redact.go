package hotpath

import "strings"

// RedactURL returns raw with its user information (a user name, a password,
// a token before the '@' of the authority) replaced by "xxxxx", for error
// messages and logs: a URL an operator wrote may carry credentials, and
// the message that names it as wrong must not repeat them. It works on
// text that does not parse as a URL too.
func RedactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "xxxxx" + raw[start+at:]
}
