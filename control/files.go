package control

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/textproto"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/control/filetext"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// FilesConfig configures the file routes.
type FilesConfig struct {
	// Store holds the bytes; nil leaves the file routes out.
	Store storage.FileStore
	// MaxFileBytes is the largest file accepted. Default 64 MiB.
	MaxFileBytes int64
	// Text bounds the text read at upload.
	Text filetext.Config
	// Now is the clock uploads, reads and expiry are judged by; nil is
	// time.Now. Tests inject one.
	Now func() time.Time
}

// DefaultMaxFileBytes is the default per-file byte limit.
const DefaultMaxFileBytes = 64 << 20

// UploadOverhead is what the upload route admits beyond MaxFileBytes: the
// multipart framing and the small fields.
const UploadOverhead = 1 << 20

// Validate fills in defaults.
func (c *FilesConfig) Validate() error {
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxFileBytes > 1<<30 {
		return errors.New("files.max_file_bytes: at most 1 GiB")
	}
	return c.Text.Validate()
}

// MaxUploadBody is the largest request body the upload route reads: the
// HTTP layer's bound for that route (proxy.ServerConfig.LargeBodies).
func (c *FilesConfig) MaxUploadBody() int {
	m := c.MaxFileBytes
	if m <= 0 {
		m = DefaultMaxFileBytes
	}
	return int(m + UploadOverhead)
}

// File lifetimes a client may ask for, in seconds.
const (
	fileExpiresMin = 60
	fileExpiresMax = 604800
)

// filePurposes are the purposes a file may be uploaded with.
var filePurposes = map[string]bool{"chat_attachment": true}

// Refusals of the file routes.
var (
	// ErrFileNotFound answers every file id the caller cannot read: missing,
	// malformed, another user's or organization's, deleted or expired.
	ErrFileNotFound = codec.NewError(codec.CodeFileNotFound, "No such file.")

	errFileExpiresPin = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "expires_in: requires the Gateway-Version pin " + codec.VersionFileExpiresIn.String() +
			" or later; nothing was stored.",
		Detail: codec.Detail{RequiredVersion: codec.VersionFileExpiresIn.String()}}
	errFileExpiresRange = convInvalid("expires_in: must be an integer number of seconds from " +
		strconv.Itoa(fileExpiresMin) + " to " + strconv.Itoa(fileExpiresMax) + ".")
	errFileNotMultipart = convInvalid("Upload a file as multipart/form-data with a file part and a purpose part.")
	errFileMalformed    = convInvalid("The multipart/form-data body is malformed.")
	errFileMissingPart  = convInvalid("file: the part with the file's bytes is required, with a filename.")
	errFilePurpose      = convInvalid("purpose: required; the one value accepted is chat_attachment.")
	errFileFilename     = convInvalid("file: the filename must be 1 to 255 bytes of UTF-8 once its directories are dropped.")
	errFileCursor       = convInvalid("cursor: not a cursor this route issued.")
)

// registerFiles adds the file routes when a store is configured.
func (a *API) registerFiles(r Registrar) {
	if a.Files.Store == nil {
		return
	}
	_ = a.Files.Validate()
	a.fileText = filetext.NewReader(a.Files.Text)
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyFiles}
	}
	const base = "/api/v1/files"
	r.Handle(fasthttp.MethodPost, base, access("files_upload"), a.uploadFile)
	r.Handle(fasthttp.MethodGet, base, access("files_list"), a.listFiles)
	r.Handle(fasthttp.MethodGet, base+"/{id}", access("files_read"), a.readFile)
	r.Handle(fasthttp.MethodGet, base+"/{id}/content", access("files_content"), a.fileContent)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("files_delete"), a.deleteFile)
}

func (a *API) filesNow() time.Time {
	if a.Files.Now != nil {
		return a.Files.Now()
	}
	return time.Now()
}

// fileJSON is a file record as every route shows it.
type fileJSON struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Filename    string  `json:"filename"`
	Bytes       int64   `json:"bytes"`
	ContentType string  `json:"content_type"`
	Purpose     string  `json:"purpose"`
	CreatedAt   int64   `json:"created_at"`
	ExpiresAt   *int64  `json:"expires_at"`
	TextStatus  string  `json:"text_status"`
	TextTokens  int     `json:"text_tokens"`
	Reason      *string `json:"reason,omitempty"`
	Pages       *int    `json:"pages,omitempty"`
}

func toFileJSON(f *storage.File) fileJSON {
	out := fileJSON{ID: f.ID, Object: "file", Filename: f.Filename, Bytes: f.Bytes, ContentType: f.ContentType,
		Purpose: f.Purpose, CreatedAt: f.CreatedAt.Unix(), TextStatus: f.TextStatus, TextTokens: f.TextTokens,
		Reason: f.TextReason, Pages: f.Pages}
	if f.ExpiresAt != nil {
		s := f.ExpiresAt.Unix()
		out.ExpiresAt = &s
	}
	return out
}

func fileID(ctx *fasthttp.RequestCtx) string {
	id, _ := ctx.UserValue("id").(string)
	return id
}

// uploadForm is the parsed upload: the fields and the file's bytes, a
// slice of the request body (never copied).
type uploadForm struct {
	filename  string
	content   []byte
	purpose   string
	expiresIn *int
}

// uploadFile stores a file: the form is checked whole before anything is
// stored, the text is read, the record is written pending, the bytes are
// stored, then the record becomes readable. A failure at any step stores
// nothing.
func (a *API) uploadFile(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if c.User.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	form, cerr := parseUploadForm(ctx)
	if cerr != nil {
		return cerr
	}
	if !filePurposes[form.purpose] {
		return errFilePurpose
	}
	if form.expiresIn != nil {
		if !c.Pinned || c.Version < codec.VersionFileExpiresIn {
			return errFileExpiresPin
		}
		if *form.expiresIn < fileExpiresMin || *form.expiresIn > fileExpiresMax {
			return errFileExpiresRange
		}
	}
	if int64(len(form.content)) > a.Files.MaxFileBytes {
		return &codec.Error{Code: codec.CodePayloadTooLarge,
			Message: "file: larger than the " + strconv.FormatInt(a.Files.MaxFileBytes, 10) + "-byte limit; nothing was stored.",
			Detail:  codec.Detail{Bound: "file_bytes", Limit: a.Files.MaxFileBytes, HasLimit: true}}
	}
	now := a.filesNow()
	rctx, cancel := context.WithTimeout(context.Background(), a.Files.Text.Timeout+queryTimeout)
	defer cancel()
	text := a.fileText.Read(rctx, form.content, form.filename)
	n := storage.NewFile{OrgID: c.User.OrgID, UserID: c.User.UserID, Filename: form.filename,
		Bytes: int64(len(form.content)), ContentType: text.ContentType, Purpose: form.purpose,
		TextStatus: text.Status, TextTokens: text.Tokens, StoreKey: newStoreKey(), CreatedAt: now}
	if text.Reason != "" {
		n.TextReason = &text.Reason
	}
	if text.Text != "" {
		n.Text = &text.Text
	}
	if text.Pages > 0 {
		n.Pages = &text.Pages
	}
	if form.expiresIn != nil {
		// Whole seconds, as the record shows it: the file is gone from
		// the second it names, not a fraction after.
		exp := now.Truncate(time.Second).Add(time.Duration(*form.expiresIn) * time.Second)
		n.ExpiresAt = &exp
	}
	sctx, scancel := context.WithTimeout(context.Background(), storeTimeout)
	defer scancel()
	f, err := a.DB.CreateFile(sctx, n)
	if err != nil {
		return storageError(err, ErrFileNotFound)
	}
	if _, err := a.Files.Store.Put(sctx, n.StoreKey, bytes.NewReader(form.content), a.Files.MaxFileBytes); err != nil {
		// The store is a dependency the request needs, not the
		// client's fault: 503, logged without the file's name.
		a.Log.Error("cannot store file bytes", "request_id", c.IDString(), "err", err)
		a.abandonUpload(f.ID, n.StoreKey)
		return codec.ErrServiceUnavailable
	}
	if err := a.DB.ReadyFile(sctx, f.ID); err != nil {
		a.abandonUpload(f.ID, n.StoreKey)
		return storageError(err, ErrFileNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, toFileJSON(&f))
}

// storeTimeout bounds writing one file's record and bytes.
const storeTimeout = 2 * time.Minute

// abandonUpload removes what a failed upload wrote; what it cannot
// remove, the janitor does once the pending record is old.
func (a *API) abandonUpload(id, key string) {
	ctx, cancel := queryContext()
	defer cancel()
	if err := a.Files.Store.Delete(ctx, key); err != nil {
		a.Log.Warn("cannot remove a failed upload's bytes; the janitor will", slog.String("file_id", id))
		return
	}
	_ = a.DB.DropPendingFile(ctx, id)
}

func newStoreKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// uploadParts bounds the parts of an upload form.
const (
	uploadMaxParts       = 8
	uploadMaxHeaderBytes = 8 << 10
	uploadMaxFieldBytes  = 64
)

// parseUploadForm reads a multipart/form-data body (RFC 7578) in place:
// each part's content is a slice of the body, so a file is held in memory
// once, as the request body. Parts are file, purpose and expires_in, each
// at most once; anything else is refused.
func parseUploadForm(ctx *fasthttp.RequestCtx) (*uploadForm, *codec.Error) {
	mt, params, err := mime.ParseMediaType(string(ctx.Request.Header.ContentType()))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" || len(params["boundary"]) > 70 {
		return nil, errFileNotMultipart
	}
	body := ctx.PostBody()
	delim := []byte("--" + params["boundary"])
	i := bytes.Index(body, delim)
	if i < 0 || (i > 0 && !bytes.HasSuffix(body[:i], []byte("\r\n"))) {
		return nil, errFileMalformed
	}
	rest := body[i+len(delim):]
	sep := append([]byte("\r\n"), delim...)
	form := &uploadForm{}
	seen := map[string]bool{}
	for parts := 0; ; parts++ {
		if bytes.HasPrefix(rest, []byte("--")) {
			return form.complete()
		}
		if !bytes.HasPrefix(rest, []byte("\r\n")) || parts >= uploadMaxParts {
			return nil, errFileMalformed
		}
		rest = rest[2:]
		end := bytes.Index(rest, sep)
		if end < 0 {
			return nil, errFileMalformed
		}
		part := rest[:end]
		rest = rest[end+len(sep):]
		hdrEnd := bytes.Index(part, []byte("\r\n\r\n"))
		if hdrEnd < 0 || hdrEnd > uploadMaxHeaderBytes {
			return nil, errFileMalformed
		}
		hdr, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(part[:hdrEnd+4]))).ReadMIMEHeader()
		if err != nil {
			return nil, errFileMalformed
		}
		content := part[hdrEnd+4:]
		if cte := strings.ToLower(hdr.Get("Content-Transfer-Encoding")); cte != "" && cte != "binary" && cte != "8bit" && cte != "7bit" {
			return nil, convInvalid("Content-Transfer-Encoding " + strconv.Quote(cte) + " is not supported; send parts in binary.")
		}
		disp, dparams, err := mime.ParseMediaType(hdr.Get("Content-Disposition"))
		if err != nil || disp != "form-data" {
			return nil, errFileMalformed
		}
		name := dparams["name"]
		if seen[name] {
			return nil, convInvalid(name + ": sent more than once.")
		}
		seen[name] = true
		switch name {
		case "file":
			fn, ok := dparams["filename"]
			if !ok {
				return nil, errFileMissingPart
			}
			if form.filename, ok = cleanFilename(fn); !ok {
				return nil, errFileFilename
			}
			form.content = content
		case "purpose":
			if len(content) > uploadMaxFieldBytes {
				return nil, errFilePurpose
			}
			form.purpose = string(content)
		case "expires_in":
			n, err := strconv.Atoi(strings.TrimSpace(string(content)))
			if err != nil || len(content) > uploadMaxFieldBytes {
				return nil, errFileExpiresRange
			}
			form.expiresIn = &n
		default:
			return nil, convInvalid("Unknown form field " + strconv.Quote(truncateName(name)) +
				"; an upload has file, purpose and optionally expires_in.")
		}
	}
}

func (f *uploadForm) complete() (*uploadForm, *codec.Error) {
	if f.filename == "" {
		return nil, errFileMissingPart
	}
	if f.purpose == "" {
		return nil, errFilePurpose
	}
	return f, nil
}

func truncateName(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.ToValidUTF8(s, "")
}

// cleanFilename keeps a filename's last path element (a client may send
// C:\dir\name or ../../name), without control characters, at most 255
// bytes.
func cleanFilename(raw string) (string, bool) {
	if !utf8.ValidString(raw) {
		return "", false
	}
	raw = raw[strings.LastIndexAny(raw, `/\`)+1:]
	raw = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, raw)
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "." || raw == ".." || len(raw) > 255 {
		return "", false
	}
	return raw, true
}

// listFiles answers the caller's files, newest first, a keyset page at a
// time: limit (default 20, at most 100) and the previous page's
// next_cursor as cursor.
func (a *API) listFiles(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cerr := convPageLimit("limit", convQueryArg(ctx, "limit"), 20, 100)
	if cerr != nil {
		return cerr
	}
	var after *storage.FileKey
	if raw := convQueryArg(ctx, "cursor"); len(raw) > 0 {
		k, ok := decodeFileCursor(string(raw))
		if !ok {
			return errFileCursor
		}
		after = &k
	}
	qctx, cancel := queryContext()
	defer cancel()
	files, more, err := a.DB.ListFiles(qctx, c.User.UserID, c.User.OrgID, a.filesNow(), after, limit)
	if errors.Is(err, storage.ErrBadCursor) {
		return errFileCursor
	}
	if err != nil {
		return storageError(err, ErrFileNotFound)
	}
	data := make([]fileJSON, len(files))
	for i := range files {
		data[i] = toFileJSON(&files[i])
	}
	var next *string
	if more {
		last := files[len(files)-1]
		s := encodeFileCursor(last.CreatedAt, last.ID)
		next = &s
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": data, "has_more": more,
		"next_cursor": next})
}

// A file cursor is base64url of 'f', the last file's created_at (Unix
// microseconds, varint) and its id.
func encodeFileCursor(at time.Time, id string) string {
	b := binary.AppendVarint([]byte{'f'}, at.UnixMicro())
	return base64.RawURLEncoding.EncodeToString(append(b, id...))
}

func decodeFileCursor(s string) (storage.FileKey, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != 'f' {
		return storage.FileKey{}, false
	}
	us, n := binary.Varint(b[1:])
	if n <= 0 {
		return storage.FileKey{}, false
	}
	at, ok := storage.CursorTime(us)
	id := string(b[1+n:])
	if !ok || !storage.ValidUUID(id) {
		return storage.FileKey{}, false
	}
	return storage.FileKey{CreatedAt: at, ID: id}, true
}

// readFile answers one file's record.
func (a *API) readFile(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	f, err := a.DB.GetFile(qctx, c.User.UserID, c.User.OrgID, fileID(ctx), a.filesNow())
	if err != nil {
		return storageError(err, ErrFileNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, toFileJSON(&f))
}

// fileContent streams a file's bytes, as stored, with its sniffed type,
// nosniff, and an attachment disposition naming it safely.
func (a *API) fileContent(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	f, err := a.DB.GetFile(qctx, c.User.UserID, c.User.OrgID, fileID(ctx), a.filesNow())
	cancel()
	if err != nil {
		return storageError(err, ErrFileNotFound)
	}
	// The body is read after the handler returns; its context ends when
	// the read does, or after the store timeout.
	rctx, rcancel := context.WithTimeout(context.Background(), storeTimeout)
	r, err := a.Files.Store.Open(rctx, f.StoreKey)
	if err != nil {
		rcancel()
		if errors.Is(err, storage.ErrNotFound) {
			return ErrFileNotFound
		}
		a.Log.Error("cannot read file bytes", "request_id", c.IDString(), "err", err)
		return codec.ErrServiceUnavailable
	}
	h := &ctx.Response.Header
	h.SetContentType(f.ContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", contentDisposition(f.Filename))
	h.Set("Cache-Control", "private, no-store")
	ctx.SetBodyStream(&cancelOnClose{ReadCloser: r, cancel: rcancel}, int(f.Bytes))
	return nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// contentDisposition names the file for a download: an ASCII fallback with
// anything outside printable ASCII, quotes and backslashes replaced, and
// the exact name in RFC 5987 form.
func contentDisposition(name string) string {
	fallback := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' || r == ';' {
			return '_'
		}
		return r
	}, name)
	return `attachment; filename="` + fallback + `"; filename*=UTF-8''` + rfc5987(name)
}

func rfc5987(s string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// deleteFile deletes a file: gone to every read at once and detached from
// every message that listed it; the janitor deletes the bytes.
func (a *API) deleteFile(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if c.User.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	id := fileID(ctx)
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteFile(qctx, c.User.UserID, c.User.OrgID, id, a.filesNow()); err != nil {
		return storageError(err, ErrFileNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}
