// Package pii finds the personal data the gateway refuses to store in
// standing rules and memory: e-mail addresses, phone numbers and card
// numbers. It reports only the category and where it was found, never the
// matched text, so a refusal can be explained without echoing it.
//
// The detectors are deliberately plain and linear in the input:
//
//   - e-mail: a local part of [A-Za-z0-9._%+-], "@", and a domain of
//     dot-separated labels ending in an alphabetic label of two or more
//     letters;
//   - card: a run of 13 to 19 digits, optionally grouped by single spaces,
//     hyphens or dots, that passes the Luhn check, wherever it stands
//     (card_4111… is one);
//   - phone: a run of digits grouped by spaces, hyphens, dots or
//     parentheses holding 10 to 15 digits, or 8 to 15 after a leading "+"
//     (so dates such as 2026-09-26 and short codes are not phone numbers),
//     standing as a word of its own: a run glued to letters or "_" is an
//     identifier (abc1234567890), not a phone number.
package pii

// Category names a kind of personal data.
type Category string

// The categories, as reported in errors and responses.
const (
	Email Category = "email"
	Phone Category = "phone"
	Card  Category = "card"
)

// Find returns the first category of personal data in s and its byte
// offset; ok is false when s carries none.
func Find(s string) (c Category, offset int, ok bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '@' {
			if start, ok := email(s, i); ok {
				return Email, start, true
			}
		}
	}
	for i := 0; i < len(s); {
		b := s[i]
		if !isDigit(b) && b != '+' && b != '(' {
			i++
			continue
		}
		if i > 0 && isDigit(s[i-1]) {
			i++
			continue
		}
		end, digits, card := digitRun(s, i)
		if card {
			// A Luhn-valid run is a card wherever it stands, glued to a
			// word (card_4111…) or not.
			return Card, i, true
		}
		min := 10
		if b == '+' {
			min = 8
		}
		// A phone number stands as a word of its own: a run glued to
		// letters is an identifier (abc1234567890, order_5551234567).
		glued := i > 0 && isWord(s[i-1]) || end < len(s) && isWord(s[end])
		if digits >= min && digits <= 15 && !glued {
			return Phone, i, true
		}
		if end == i {
			end = i + 1
		}
		i = end
	}
	return "", 0, false
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func isAlpha(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

func isWord(b byte) bool { return isAlpha(b) || b == '_' }

func isLocal(b byte) bool {
	return isAlpha(b) || isDigit(b) || b == '.' || b == '_' || b == '%' || b == '+' || b == '-'
}

// email checks the address around the "@" at at; it returns where the
// local part starts.
func email(s string, at int) (int, bool) {
	start := at
	for start > 0 && isLocal(s[start-1]) {
		start--
	}
	if start == at {
		return 0, false
	}
	labels, lastLen, lastAlpha := 0, 0, false
	for j := at + 1; ; {
		k, alpha := j, true
		for k < len(s) && (isAlpha(s[k]) || isDigit(s[k]) || s[k] == '-') {
			alpha = alpha && isAlpha(s[k])
			k++
		}
		if k == j {
			break
		}
		labels, lastLen, lastAlpha = labels+1, k-j, alpha
		if k >= len(s) || s[k] != '.' {
			break
		}
		j = k + 1
	}
	return start, labels >= 2 && lastAlpha && lastLen >= 2
}

// digitRun scans a run of digits and grouping characters from i: it
// returns where the run ends, how many digits it holds, and whether it is
// a Luhn-valid card number grouped only by single spaces or hyphens.
func digitRun(s string, i int) (end, digits int, card bool) {
	var buf [19]byte
	cardShape := s[i] != '+' && s[i] != '('
	j := i
	if s[j] == '+' {
		j++
	}
	prevSep := true
	for ; j < len(s); j++ {
		b := s[j]
		switch {
		case isDigit(b):
			if digits < len(buf) {
				buf[digits] = b - '0'
			}
			digits++
			prevSep = false
		case b == ' ' || b == '-' || b == '.' || b == '(' || b == ')':
			if b != ' ' && b != '-' && b != '.' {
				cardShape = false
			}
			if prevSep && b != '(' {
				cardShape = false
			}
			// A separator continues the run only when a digit (or an
			// opening parenthesis) follows it.
			if j+1 >= len(s) || !(isDigit(s[j+1]) || s[j+1] == '(' || (b == ')' && s[j+1] == ' ')) {
				return j, digits, cardShape && luhn(buf[:], digits)
			}
			prevSep = true
		default:
			return j, digits, cardShape && luhn(buf[:], digits)
		}
	}
	return j, digits, cardShape && luhn(buf[:], digits)
}

// luhn checks the first n digits of d (13 to 19 of them).
func luhn(d []byte, n int) bool {
	if n < 13 || n > 19 {
		return false
	}
	sum := 0
	for k := 0; k < n; k++ {
		v := int(d[n-1-k])
		if k%2 == 1 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	return sum%10 == 0
}
