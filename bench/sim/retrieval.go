package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath/tokens"
)

// DefaultDimensions is the length of an embedding when the request does not
// ask for another with "dimensions".
const DefaultDimensions = 64

// maxInputs bounds the inputs of one embeddings or rerank request.
const maxInputs = 4096

type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

func (s *Server) embeddings(ctx *fasthttp.RequestCtx) {
	body := ctx.PostBody()
	var req embeddingsRequest
	if err := sonic.Unmarshal(body, &req); err != nil {
		badRequest(ctx, "", "cannot decode request body: "+err.Error())
		return
	}
	inputs, err := stringList(req.Input)
	if err != nil {
		badRequest(ctx, "input", "input "+err.Error())
		return
	}
	dims := DefaultDimensions
	if req.Dimensions != nil {
		if dims = *req.Dimensions; dims < 1 || dims > 4096 {
			badRequest(ctx, "dimensions", "dimensions must be from 1 to 4096")
			return
		}
	}
	if f := req.EncodingFormat; f != "" && f != "float" && f != "base64" {
		badRequest(ctx, "encoding_format", "encoding_format must be float or base64")
		return
	}
	d, err := parseDirectives(strings.Join(inputs, "\n"))
	if err != nil {
		badRequest(ctx, "input", err.Error())
		return
	}
	n := 0
	for _, in := range inputs {
		n += tokens.Count(in)
	}
	if s.applyErrors(ctx, &d, hashBytes(body)^s.cfg.Seed, n, 0) || !s.wait(ctx, &d) {
		return
	}

	out := make([]byte, 0, 64+len(inputs)*dims*12)
	out = append(out, `{"object":"list","data":[`...)
	vec := make([]float32, dims)
	raw := make([]byte, 4*dims)
	for i, in := range inputs {
		if i > 0 {
			out = append(out, ',')
		}
		embedText(vec, in, s.cfg.Seed)
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		if req.EncodingFormat == "base64" {
			for j, v := range vec {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
			}
			out = append(out, '"')
			out = base64.StdEncoding.AppendEncode(out, raw)
			out = append(out, '"')
		} else {
			out = append(out, '[')
			for j, v := range vec {
				if j > 0 {
					out = append(out, ',')
				}
				out = strconv.AppendFloat(out, float64(v), 'g', -1, 32)
			}
			out = append(out, ']')
		}
		out = append(out, '}')
	}
	out = append(out, `],"model":`...)
	out = codec.AppendJSONString(out, req.Model)
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(n), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(n), 10)
	out = append(out, "}}"...)
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// embedText fills vec with the embedding of text: the normalised sum of
// one random unit vector per distinct word (lowercase letters and digits),
// so texts that share words are similar and texts that share none are
// nearly orthogonal. A text without words gets a vector drawn from its
// bytes.
func embedText(vec []float32, text string, seed uint64) {
	words := map[string]bool{}
	for w := range strings.FieldsFuncSeq(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		words[w] = true
	}
	if len(words) == 0 {
		embed(vec, hashString(text)^seed)
		return
	}
	clear(vec)
	one := make([]float32, len(vec))
	for w := range words {
		embed(one, hashString(w)^seed)
		for i := range vec {
			vec[i] += one[i]
		}
	}
	var sum float64
	for _, x := range vec {
		sum += float64(x) * float64(x)
	}
	norm := float32(math.Sqrt(sum))
	for i := range vec {
		vec[i] /= norm
	}
}

// embed fills vec with a unit vector drawn from seed.
func embed(vec []float32, seed uint64) {
	var sum float64
	for i := range vec {
		// 53 random bits to [-1, 1).
		x := float64(mix(seed, uint64(i+1))>>11)/(1<<52) - 1
		vec[i] = float32(x)
		sum += x * x
	}
	norm := math.Sqrt(sum)
	if norm == 0 {
		vec[0], norm = 1, 1
	}
	for i := range vec {
		vec[i] = float32(float64(vec[i]) / norm)
	}
}

// stringList decodes a string or a non-empty array of strings.
func stringList(raw json.RawMessage) ([]string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errMissing
	}
	if raw[0] == '"' {
		var s string
		if err := sonic.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	var list []string
	if err := sonic.Unmarshal(raw, &list); err != nil {
		return nil, errStrings
	}
	if len(list) == 0 {
		return nil, errMissing
	}
	if len(list) > maxInputs {
		return nil, errTooMany
	}
	return list, nil
}

var (
	errMissing = simError("is required: a string or a non-empty array of strings")
	errStrings = simError("must be a string or an array of strings")
	errTooMany = simError("has more than " + strconv.Itoa(maxInputs) + " items")
)

type simError string

func (e simError) Error() string { return string(e) }

type rerankRequest struct {
	Model           string            `json:"model"`
	Query           string            `json:"query"`
	Documents       []json.RawMessage `json:"documents"`
	Texts           []json.RawMessage `json:"texts"` // text-embeddings-inference's name for documents
	TopN            *int              `json:"top_n"`
	ReturnDocuments bool              `json:"return_documents"`
}

type rerankResult struct {
	index int
	score float64
}

func (s *Server) rerank(ctx *fasthttp.RequestCtx) {
	body := ctx.PostBody()
	var req rerankRequest
	if err := sonic.Unmarshal(body, &req); err != nil {
		badRequest(ctx, "", "cannot decode request body: "+err.Error())
		return
	}
	if req.Query == "" {
		badRequest(ctx, "query", "query is required")
		return
	}
	tei := req.Documents == nil && req.Texts != nil
	if tei {
		req.Documents = req.Texts
	}
	if len(req.Documents) == 0 || len(req.Documents) > maxInputs {
		badRequest(ctx, "documents", "documents must hold 1 to "+strconv.Itoa(maxInputs)+" documents")
		return
	}
	docs := make([]string, len(req.Documents))
	for i, raw := range req.Documents {
		text, err := documentText(raw)
		if err != nil {
			badRequest(ctx, "documents["+strconv.Itoa(i)+"]", err.Error())
			return
		}
		docs[i] = text
	}
	topN := len(docs)
	if req.TopN != nil {
		if *req.TopN < 1 {
			badRequest(ctx, "top_n", "top_n must be at least 1")
			return
		}
		topN = min(topN, *req.TopN)
	}
	d, err := parseDirectives(req.Query)
	if err != nil {
		badRequest(ctx, "query", err.Error())
		return
	}
	n := tokens.Count(req.Query)
	for _, doc := range docs {
		n += tokens.Count(doc)
	}
	if s.applyErrors(ctx, &d, hashBytes(body)^s.cfg.Seed, n, 0) || !s.wait(ctx, &d) {
		return
	}

	query := wordSet(req.Query)
	results := make([]rerankResult, len(docs))
	for i, doc := range docs {
		results[i] = rerankResult{index: i, score: relevance(query, req.Query, doc, s.cfg.Seed)}
		if d.tie {
			results[i].score = 0.5
		}
	}
	slices.SortStableFunc(results, func(a, b rerankResult) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return a.index - b.index
	})
	if tei {
		// text-embeddings-inference answers a bare array of {index, score}.
		out := make([]byte, 0, 2+topN*40)
		out = append(out, '[')
		for i, r := range results[:topN] {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"index":`...)
			out = strconv.AppendInt(out, int64(r.index), 10)
			out = append(out, `,"score":`...)
			out = strconv.AppendFloat(out, r.score, 'g', -1, 64)
			out = append(out, '}')
		}
		writeJSON(ctx, fasthttp.StatusOK, append(out, ']'))
		return
	}
	out := append(make([]byte, 0, 128+topN*48), `{"id":"rerank-sim-`...)
	out = append(out, hex16(hashBytes(body)^s.cfg.Seed)...)
	out = append(out, `","model":`...)
	out = codec.AppendJSONString(out, req.Model)
	out = append(out, `,"results":[`...)
	for i, r := range results[:topN] {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"index":`...)
		out = strconv.AppendInt(out, int64(r.index), 10)
		out = append(out, `,"relevance_score":`...)
		out = strconv.AppendFloat(out, r.score, 'g', -1, 64)
		if req.ReturnDocuments {
			out = append(out, `,"document":{"text":`...)
			out = codec.AppendJSONString(out, docs[r.index])
			out = append(out, '}')
		}
		out = append(out, '}')
	}
	out = append(out, `],"usage":{"total_tokens":`...)
	out = strconv.AppendInt(out, int64(n), 10)
	out = append(out, "}}"...)
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// documentText reads a document: a string, or an object with "text".
func documentText(raw json.RawMessage) (string, error) {
	var text string
	if err := sonic.Unmarshal(raw, &text); err == nil {
		return text, nil
	}
	var obj struct {
		Text *string `json:"text"`
	}
	if err := sonic.Unmarshal(raw, &obj); err != nil || obj.Text == nil {
		return "", simError("a document is a string or an object with text")
	}
	return *obj.Text, nil
}

// relevance scores doc against the query: the cosine of their word sets,
// scaled into [0, 0.99], plus a deterministic tie-breaker below 0.01.
func relevance(query map[string]bool, queryText, doc string, seed uint64) float64 {
	words := wordSet(doc)
	common := 0
	for w := range words {
		if query[w] {
			common++
		}
	}
	cos := 0.0
	if common > 0 {
		cos = float64(common) / math.Sqrt(float64(len(query))*float64(len(words)))
	}
	tie := float64(mix(hashString(queryText)^seed, hashString(doc))>>11) / (1 << 53)
	return math.Round((0.99*cos+0.01*tie)*1e6) / 1e6
}

// wordSet is the set of lower-case words (letters and digits) of text.
func wordSet(text string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r >= 0x80)
	}) {
		set[w] = true
	}
	return set
}

// hashString is the FNV-64a hash of s.
func hashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// The FNV-64a parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// wait holds an embeddings or rerank answer for the ttft_ms directive's
// time. It reports false, having answered 503, when the server shuts down
// meanwhile.
func (s *Server) wait(ctx *fasthttp.RequestCtx, d *directives) bool {
	if !d.hasTTFT || d.ttft <= 0 {
		return true
	}
	t := time.NewTimer(d.ttft)
	defer t.Stop()
	if !s.sleep(t, d.ttft) {
		statusError(ctx, fasthttp.StatusServiceUnavailable)
		return false
	}
	return true
}
