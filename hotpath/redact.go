package hotpath

import "strings"

// RedactURL returns raw with its user information (a user name, a password,
// a token before the '@') replaced by "xxxxx", for error messages and logs:
// a URL an operator wrote may carry credentials, and the message that names
// it as wrong must not repeat them. It works on text that does not parse as
// a URL too. Everything up to the last '@' is masked, as a password holding
// an unescaped '/' or '?' would otherwise end the authority early and show:
// a '@' in a path costs the message its path, never a secret.
func RedactURL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + len("://")
	}
	at := strings.LastIndex(raw[start:], "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "xxxxx" + raw[start+at:]
}
