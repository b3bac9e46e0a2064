package hotpath

import "strings"

// RedactURL returns raw with its secret user information replaced by
// "xxxxx", for error messages and logs: a URL an operator wrote may carry
// credentials, and the message that names it as wrong must not repeat
// them. It works on text that does not parse as a URL too. The user
// information runs to the last '@' (a password holding an unescaped '/' or
// '?' must not end it early: a '@' in a path costs the message its path,
// never a secret). A user name before a password is kept, as the database
// driver's messages keep it ("user:xxxxx@host"); user information without a
// password may be a token, and is masked whole, as is everything before
// the '@' of text without "://".
func RedactURL(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	scheme, userinfo, ok := strings.Cut(raw[:at], "://")
	if !ok {
		return "xxxxx" + raw[at:]
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		return scheme + "://" + user + ":xxxxx" + raw[at:]
	}
	return scheme + "://xxxxx" + raw[at:]
}
