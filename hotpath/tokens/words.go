package tokens

// vocabulary holds common English words each of which is exactly one token
// when preceded by a space (TestVocabulary proves it). Its length is a power
// of two so that a random word is a mask away.
var vocabulary = [256]string{
	"the", "of", "and", "to", "in", "is", "it", "you", "that", "he", "was", "for", "on",
	"are", "with", "as", "his", "they", "at", "be", "this", "have", "from", "or", "one",
	"had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can",
	"said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if",
	"will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some",
	"her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more",
	"write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first",
	"water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day",
	"did", "get", "come", "made", "may", "part", "over", "new", "sound", "take", "only",
	"little", "work", "know", "place", "year", "live", "me", "back", "give", "most", "very",
	"after", "thing", "our", "just", "name", "good", "sentence", "man", "think", "say",
	"great", "where", "help", "through", "much", "before", "line", "right", "too", "mean",
	"old", "any", "same", "tell", "boy", "follow", "came", "want", "show", "also", "around",
	"form", "three", "small", "set", "put", "end", "does", "another", "well", "large",
	"must", "big", "even", "such", "because", "turn", "here", "why", "ask", "went", "men",
	"read", "need", "land", "different", "home", "us", "move", "try", "kind", "hand",
	"picture", "again", "change", "off", "play", "spell", "air", "away", "animal", "house",
	"point", "page", "letter", "mother", "answer", "found", "study", "still", "learn",
	"should", "world", "high", "every", "near", "add", "food", "between", "own", "below",
	"country", "plant", "last", "school", "father", "keep", "tree", "never", "start",
	"city", "earth", "eye", "light", "thought", "head", "under", "story", "saw", "left",
	"few", "while", "along", "might", "close", "something", "seem", "next", "hard", "open",
	"example", "begin", "life", "always", "those", "both", "paper", "together", "got",
	"group", "often", "run", "important", "until", "children", "side", "feet", "car",
	"mile", "night", "walk", "white",
}

// starters open a sentence: each is one token both at the start of the text
// and after a space.
var starters = [32]string{
	"The", "We", "It", "This", "They", "He", "She", "You", "In", "On", "For", "But",
	"And", "So", "When", "If", "As", "At", "Then", "Now", "Here", "There", "Some",
	"Many", "Each", "One", "Our", "All", "What", "How", "After", "Every",
}

// AppendWords appends to dst a deterministic English-looking text of exactly
// n tokens drawn from seed, and returns the extended buffer; n <= 0 appends
// nothing.
//
// The text opens with a capitalised word, ends with a period when n >= 2, and
// puts a period after every 8 to 16 words (12 on average), each sentence
// opening with a capitalised word again. Words are separated by one space;
// every word with its leading space and every period is one token, and the
// encoding's pre-tokenizer splits before each space and each period, so
// nothing merges: the count is exact (TestAppendWordsExact proves it).
func AppendWords(dst []byte, seed uint64, n int) []byte {
	if n <= 0 {
		return dst
	}
	r := rng{seed}
	gap := 8 + r.next()%9 // words in this sentence before its period
	var words uint64      // words so far in this sentence
	for i := range n {
		switch {
		case n >= 2 && i == n-1:
			dst = append(dst, '.')
		case words == 0:
			if i > 0 {
				dst = append(dst, ' ')
			}
			dst = append(dst, starters[r.next()%uint64(len(starters))]...)
			words = 1
		case words >= gap && i < n-2:
			// Not within two tokens of the end, which keeps a starter
			// between this period and the final one.
			dst = append(dst, '.')
			words = 0
			gap = 8 + r.next()%9
		default:
			dst = append(dst, ' ')
			dst = append(dst, vocabulary[r.next()%uint64(len(vocabulary))]...)
			words++
		}
	}
	return dst
}

// AppendLetters appends to dst n lowercase ASCII letters drawn from seed,
// without a space: one unbroken run whose parts never repeat, the text
// that costs the encoder most a byte (the hostile-input tests and the
// bench's random_word).
func AppendLetters(dst []byte, seed uint64, n int) []byte {
	r := rng{seed}
	for range max(n, 0) {
		dst = append(dst, byte('a'+r.next()%26))
	}
	return dst
}

// rng is splitmix64: a tiny, well-mixed generator that allocates nothing.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
