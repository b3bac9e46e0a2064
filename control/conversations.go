package control

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Refusals of the conversation routes.
var (
	// ErrConversationNotFound answers every conversation the caller cannot
	// see: missing, malformed, another author's, another organization's,
	// or held in a vault the caller can no longer read.
	ErrConversationNotFound = codec.NewError(codec.CodeConversationNotFound, "No such conversation.")
	// ErrConversationForbidden refuses a write to a conversation held in a
	// vault the caller may read but not write.
	ErrConversationForbidden = codec.NewError(codec.CodeConversationForbidden,
		"The conversation is held in a vault you may read but not write.")
	// ErrMessageNotFound answers a message id that is not a message of the
	// conversation.
	ErrMessageNotFound = codec.NewError(codec.CodeMessageNotFound, "No such message in this conversation.")
	// ErrVaultNotFound answers a vault that is missing, another
	// organization's, or one the caller does not participate in.
	ErrVaultNotFound = codec.NewError(codec.CodeVaultNotFound, "No such vault.")
	// ErrVaultForbidden refuses a conversation in a vault the caller
	// participates in without the grant to write it.
	ErrVaultForbidden = codec.NewError(codec.CodeVaultForbidden,
		"vault_id: you may not write conversations in this vault.")
	// ErrAppendKeyReused refuses an Idempotency-Key reused with another body.
	ErrAppendKeyReused = codec.NewError(codec.CodeIdempotencyConflict,
		"This Idempotency-Key was used with a different request body.")

	errConvEmptyPatch = convInvalid("Send at least one of title and model; an empty patch changes nothing.")
	errConvFileIDsPin = &codec.Error{Code: codec.CodeInvalidRequest,
		Message: "file_ids: attaching files to an appended message requires the Gateway-Version pin " +
			codec.VersionMessageFileIDs.String() + " or later.",
		Detail: codec.Detail{RequiredVersion: codec.VersionMessageFileIDs.String()}}
	errConvFileIDsScope = &codec.Error{Code: codec.CodeKeyScopeForbidden,
		Message: "file_ids: attaching files needs the files scope, which this key's allowed scopes do not include.",
		Detail:  codec.Detail{RequiredScope: hotpath.FamilyFiles.String()}}
	errConvIdemKeyLong = convInvalid("Idempotency-Key: at most " + strconv.Itoa(convIdemKeyMax) + " bytes.")
)

// registerConversations adds the conversation routes.
func (a *API) registerConversations(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyConversations}
	}
	const base = "/api/v1/conversations"
	r.Handle(fasthttp.MethodGet, base, access("conversations_list"), a.listConversations)
	r.Handle(fasthttp.MethodPost, base, access("conversations_create"), a.createConversation)
	r.Handle(fasthttp.MethodGet, base+"/search", access("conversations_search"), a.searchConversations)
	r.Handle(fasthttp.MethodGet, base+"/{id}", access("conversations_read"), a.readConversation)
	r.Handle(fasthttp.MethodPatch, base+"/{id}", access("conversations_update"), a.updateConversation)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("conversations_delete"), a.deleteConversation)
	r.Handle(fasthttp.MethodPut, base+"/{id}/archive", access("conversations_archive"), a.archiveConversation)
	r.Handle(fasthttp.MethodDelete, base+"/{id}/archive", access("conversations_restore"), a.restoreConversation)
	r.Handle(fasthttp.MethodPost, base+"/{id}/messages", access("conversations_append"), a.appendConversationMessage)
	r.Handle(fasthttp.MethodPost, base+"/{id}/switch", access("conversations_switch"), a.switchConversationBranch)
}

// conversationError maps the conversation queries' errors to their codes.
func conversationError(err error) error {
	var ref *storage.MessageRefError
	var missing *storage.FileMissingError
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return ErrConversationNotFound
	case errors.Is(err, storage.ErrConversationReadOnly):
		return ErrConversationForbidden
	case errors.Is(err, storage.ErrMessageNotFound):
		return ErrMessageNotFound
	case errors.Is(err, storage.ErrVaultNotFound):
		return ErrVaultNotFound
	case errors.Is(err, storage.ErrVaultForbidden):
		return ErrVaultForbidden
	case errors.Is(err, storage.ErrAppendKeyReused):
		return ErrAppendKeyReused
	case errors.Is(err, storage.ErrBadCursor):
		return errConvMessageCursor
	case errors.As(err, &ref):
		return convInvalid(ref.Field + ": not a message of this conversation.")
	case errors.As(err, &missing):
		return &codec.Error{Code: codec.CodeFileNotFound, Message: "file_ids: no such file.",
			Detail: codec.Detail{FileID: missing.ID}}
	}
	return storageError(err, ErrConversationNotFound)
}

// The response shapes.

type convPermissionsJSON struct {
	CanRead  bool `json:"can_read"`
	CanWrite bool `json:"can_write"`
}

type conversationJSON struct {
	ID                  string              `json:"id"`
	Object              string              `json:"object"`
	Title               *string             `json:"title"`
	Model               *string             `json:"model"`
	VaultID             *string             `json:"vault_id"`
	Source              string              `json:"source"`
	Meta                json.RawMessage     `json:"meta"`
	Archived            bool                `json:"archived"`
	ArchivedAt          *string             `json:"archived_at"`
	ActiveLeafMessageID *string             `json:"active_leaf_message_id"`
	MessageCount        int                 `json:"message_count"`
	CreatedAt           string              `json:"created_at"`
	UpdatedAt           string              `json:"updated_at"`
	RetentionUntil      string              `json:"retention_until"`
	Permissions         convPermissionsJSON `json:"permissions"`
}

type convMessageJSON struct {
	ID             string          `json:"id"`
	Object         string          `json:"object"`
	ConversationID string          `json:"conversation_id"`
	ParentID       *string         `json:"parent_id"`
	Sequence       int             `json:"sequence"`
	Role           string          `json:"role"`
	Content        string          `json:"content"`
	Status         string          `json:"status"`
	ToolCalls      json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID     *string         `json:"tool_call_id,omitempty"`
	FileIDs        []string        `json:"file_ids"`
	SiblingIDs     []string        `json:"sibling_ids"`
	CreatedAt      string          `json:"created_at"`
}

type convMessagePageJSON struct {
	Object     string            `json:"object"`
	Data       []convMessageJSON `json:"data"`
	LeafID     *string           `json:"leaf_id"`
	Order      string            `json:"order"`
	NextCursor *string           `json:"next_cursor"`
}

type conversationReadJSON struct {
	conversationJSON
	Messages convMessagePageJSON `json:"messages"`
}

type convAppendJSON struct {
	Message      convMessageJSON  `json:"message"`
	Conversation conversationJSON `json:"conversation"`
	LeafMoved    bool             `json:"leaf_moved"`
}

type convSearchHitJSON struct {
	Object            string  `json:"object"`
	MessageID         string  `json:"message_id"`
	ConversationID    string  `json:"conversation_id"`
	ConversationTitle *string `json:"conversation_title"`
	Archived          bool    `json:"archived"`
	Role              string  `json:"role"`
	Sequence          int     `json:"sequence"`
	Snippet           string  `json:"snippet"`
	OnActivePath      bool    `json:"on_active_path"`
	Rank              float32 `json:"rank"`
	CreatedAt         string  `json:"created_at"`
}

// convTime formats a stored instant: RFC 3339 in UTC with the database's
// microseconds.
func convTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func toConversationJSON(c *storage.Conversation) conversationJSON {
	out := conversationJSON{ID: c.ID, Object: "conversation", Title: c.Title, Model: c.Model, VaultID: c.VaultID,
		Source: c.Source, Meta: json.RawMessage("{}"), Archived: c.ArchivedAt != nil,
		ActiveLeafMessageID: c.ActiveLeafMessageID, MessageCount: c.MessageCount,
		CreatedAt: convTime(c.CreatedAt), UpdatedAt: convTime(c.UpdatedAt), RetentionUntil: convTime(c.RetentionUntil),
		Permissions: convPermissionsJSON{CanRead: true, CanWrite: c.CanWrite}}
	if c.Meta != nil {
		out.Meta = json.RawMessage(c.Meta)
	}
	if c.ArchivedAt != nil {
		s := convTime(*c.ArchivedAt)
		out.ArchivedAt = &s
	}
	return out
}

func toConvMessageJSON(m *storage.Message) convMessageJSON {
	out := convMessageJSON{ID: m.ID, Object: "conversation.message", ConversationID: m.ConversationID, ParentID: m.ParentID,
		Sequence: m.Sequence, Role: m.Role, Content: m.Content, Status: m.Status, ToolCallID: m.ToolCallID,
		FileIDs: m.FileIDs, SiblingIDs: m.SiblingIDs, CreatedAt: convTime(m.CreatedAt)}
	if m.ToolCalls != nil {
		out.ToolCalls = json.RawMessage(m.ToolCalls)
	}
	return out
}

// convID is the conversation id of the path. Like it, every id these
// routes take (path, query or body) is canonicalized where it is parsed
// (storage.CanonUUID): ids are compared, hashed and echoed in Go, and
// PostgreSQL's lower case is the one spelling those agree on. A malformed
// id is left as sent, for storage to answer as a missing one.
func convID(ctx *fasthttp.RequestCtx) string {
	id, _ := ctx.UserValue("id").(string)
	storage.CanonUUID(&id)
	return id
}

// convQueryArg returns a query parameter, or nil when it is absent.
func convQueryArg(ctx *fasthttp.RequestCtx, name string) []byte {
	args := ctx.QueryArgs()
	if !args.Has(name) {
		return nil
	}
	return args.Peek(name)
}

// convSource parses a source filter: chat when absent.
func convSource(raw []byte) (string, *codec.Error) {
	switch s := string(raw); s {
	case "":
		if raw == nil {
			return "chat", nil
		}
	case "chat", "cli", "agent":
		return s, nil
	}
	return "", convInvalid("source: must be chat, cli or agent.")
}

// listConversations answers the caller's own conversations, most recently
// active first, a keyset page at a time.
func (a *API) listConversations(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cerr := convPageLimit("limit", convQueryArg(ctx, "limit"), convListDefault, convListMax)
	if cerr != nil {
		return cerr
	}
	f := storage.ConversationFilter{}
	if f.Source, cerr = convSource(convQueryArg(ctx, "source")); cerr != nil {
		return cerr
	}
	switch raw := convQueryArg(ctx, "archived"); string(raw) {
	case "true":
		f.Archived = true
	case "false":
	default:
		if raw != nil {
			return convInvalid("archived: must be true or false.")
		}
	}
	if raw := convQueryArg(ctx, "vault_id"); raw != nil {
		v := string(raw)
		storage.CanonUUID(&v)
		f.VaultID = &v
	}
	filters := convListFilterHash(f.Source, f.Archived, f.VaultID)
	var after *storage.ConversationKey
	if raw := convQueryArg(ctx, "cursor"); len(raw) > 0 {
		cur, cerr := decodeConvListCursor(string(raw), filters)
		if cerr != nil {
			return cerr
		}
		after = &storage.ConversationKey{UpdatedAt: cur.updatedAt, ID: cur.id}
	}
	qctx, cancel := queryContext()
	defer cancel()
	convs, more, err := a.DB.ListConversations(qctx, c.User.UserID, c.User.OrgID, f, after, limit)
	if errors.Is(err, storage.ErrBadCursor) {
		return errConvCursor
	}
	if err != nil {
		return conversationError(err)
	}
	data := make([]conversationJSON, len(convs))
	for i := range convs {
		data[i] = toConversationJSON(&convs[i])
	}
	var next *string
	if more {
		last := convs[len(convs)-1]
		s := convListCursor{filters: filters, updatedAt: last.UpdatedAt, id: last.ID}.encode()
		next = &s
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": data, "next_cursor": next})
}

// createConversation creates a conversation of the caller in the key's
// organization.
func (a *API) createConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	var n storage.NewConversation
	if n.Title, cerr = f.str("title"); cerr != nil {
		return cerr
	}
	if cerr = convCheckTitle(n.Title); cerr != nil {
		return cerr
	}
	if n.Model, cerr = f.str("model"); cerr != nil {
		return cerr
	}
	if cerr = convCheckModel(n.Model); cerr != nil {
		return cerr
	}
	source, cerr := f.str("source")
	if cerr != nil {
		return cerr
	}
	switch {
	case source == nil:
		n.Source = "chat"
	case *source == "chat" || *source == "cli":
		n.Source = *source
	case *source == "agent":
		return convInvalid("source: agent transcripts are written only by the gateway; create accepts chat or cli.")
	default:
		return convInvalid("source: must be chat or cli.")
	}
	if f.given("meta") {
		if n.Meta, cerr = convCompactObject("meta", f["meta"]); cerr != nil {
			return cerr
		}
		if len(n.Meta) > convMetaMax {
			return convInvalid("meta: at most " + strconv.Itoa(convMetaMax) + " bytes once compacted (this one is " +
				strconv.Itoa(len(n.Meta)) + ").")
		}
	}
	if n.VaultID, cerr = f.str("vault_id"); cerr != nil {
		return cerr
	}
	if n.VaultID != nil {
		storage.CanonUUID(n.VaultID)
	}
	qctx, cancel := queryContext()
	defer cancel()
	conv, err := a.DB.CreateConversation(qctx, c.User.UserID, c.User.OrgID, n)
	if err != nil {
		return conversationError(err)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, toConversationJSON(&conv))
}

func convCheckTitle(title *string) *codec.Error {
	if title != nil && len([]rune(*title)) > convTitleMax {
		return convInvalid("title: at most " + strconv.Itoa(convTitleMax) + " characters.")
	}
	return nil
}

func convCheckModel(model *string) *codec.Error {
	if model != nil && len(*model) > convModelMax {
		return convInvalid("model: at most " + strconv.Itoa(convModelMax) + " bytes.")
	}
	return nil
}

// readConversation answers a conversation with one page of one path
// through its messages.
func (a *API) readConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cerr := convPageLimit("message_limit", convQueryArg(ctx, "message_limit"), convMessageDefault, convMessageMax)
	if cerr != nil {
		return cerr
	}
	r := storage.MessagePageRequest{Limit: limit}
	switch raw := convQueryArg(ctx, "message_order"); string(raw) {
	case "desc":
		r.Desc = true
	case "asc":
	default:
		if raw != nil {
			return convInvalid("message_order: must be asc or desc.")
		}
	}
	cursor, branch := convQueryArg(ctx, "message_cursor"), convQueryArg(ctx, "message_branch")
	if len(cursor) > 0 && branch != nil {
		return convInvalid("message_branch: cannot be combined with message_cursor, which already names its branch.")
	}
	if len(cursor) > 0 {
		cur, cerr := decodeConvMessageCursor(string(cursor), r.Desc)
		if cerr != nil {
			return cerr
		}
		r.Leaf, r.After = &cur.leaf, cur.after
	}
	if branch != nil {
		b := string(branch)
		storage.CanonUUID(&b)
		r.Branch = &b
	}
	qctx, cancel := queryContext()
	defer cancel()
	page, err := a.DB.ReadConversation(qctx, c.User.UserID, c.User.OrgID, convID(ctx), r)
	if err != nil {
		return conversationError(err)
	}
	out := conversationReadJSON{conversationJSON: toConversationJSON(&page.Conversation),
		Messages: convMessagePageJSON{Object: "list", Data: make([]convMessageJSON, len(page.Messages)), Order: "asc"}}
	if r.Desc {
		out.Messages.Order = "desc"
	}
	for i := range page.Messages {
		out.Messages.Data[i] = toConvMessageJSON(&page.Messages[i])
	}
	if page.LeafID != "" {
		out.Messages.LeafID = &page.LeafID
	}
	if page.More {
		last := page.Messages[len(page.Messages)-1]
		s := convMessageCursor{desc: r.Desc, leaf: page.LeafID, after: last.Sequence}.encode()
		out.Messages.NextCursor = &s
	}
	return writeJSON(ctx, fasthttp.StatusOK, out)
}

// updateConversation patches the title and model.
func (a *API) updateConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	for _, name := range []string{"vault_id", "source", "meta"} {
		if f.present(name) {
			return convInvalid(name + ": cannot be changed after create; a patch takes title and model.")
		}
	}
	var p storage.ConversationPatch
	if p.SetTitle = f.present("title"); p.SetTitle {
		if p.Title, cerr = f.str("title"); cerr != nil {
			return cerr
		}
		if cerr = convCheckTitle(p.Title); cerr != nil {
			return cerr
		}
	}
	if p.SetModel = f.present("model"); p.SetModel {
		if p.Model, cerr = f.str("model"); cerr != nil {
			return cerr
		}
		if cerr = convCheckModel(p.Model); cerr != nil {
			return cerr
		}
	}
	if !p.SetTitle && !p.SetModel {
		return errConvEmptyPatch
	}
	qctx, cancel := queryContext()
	defer cancel()
	conv, err := a.DB.UpdateConversation(qctx, c.User.UserID, c.User.OrgID, convID(ctx), p)
	if err != nil {
		return conversationError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, toConversationJSON(&conv))
}

// deleteConversation deletes a conversation and its messages at once,
// recording the deletion as metadata with the request id.
func (a *API) deleteConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteConversation(qctx, c.User.UserID, c.User.OrgID, convID(ctx), c.IDString()); err != nil {
		return conversationError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) archiveConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	return a.setConversationArchived(ctx, c, true)
}

func (a *API) restoreConversation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	return a.setConversationArchived(ctx, c, false)
}

func (a *API) setConversationArchived(ctx *fasthttp.RequestCtx, c *hotpath.Call, archived bool) error {
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.SetConversationArchived(qctx, c.User.UserID, c.User.OrgID, convID(ctx), archived); err != nil {
		return conversationError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// appendConversationMessage appends a message; with an Idempotency-Key a retry of the
// same request replays the stored 201.
func (a *API) appendConversationMessage(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	key := ctx.Request.Header.Peek("Idempotency-Key")
	if len(key) > convIdemKeyMax {
		return errConvIdemKeyLong
	}
	in, cerr := parseConvAppend(ctx.PostBody(), c)
	if cerr != nil {
		return cerr
	}
	var idem *storage.AppendKey
	if len(key) > 0 {
		canonical, err := sonic.Marshal(in)
		if err != nil {
			return err
		}
		idem = &storage.AppendKey{KeyHash: sha256.Sum256(key), BodyHash: sha256.Sum256(canonical)}
	}
	n := storage.NewMessage{Role: in.Role, Content: in.Content, Status: in.Status, ToolCalls: in.ToolCalls,
		ToolCallID: in.ToolCallID, FileIDs: in.FileIDs, ParentID: in.ParentID, Root: in.Root, ExpectedLeaf: in.ExpectedLeaf,
		FilesAt: a.filesNow()}
	if in.Role == "user" {
		n.Title = deriveConvTitle(in.Content)
	}
	qctx, cancel := queryContext()
	defer cancel()
	_, body, err := a.DB.AppendMessage(qctx, c.User.UserID, c.User.OrgID, convID(ctx), n, idem,
		func(r *storage.AppendResult) ([]byte, error) {
			return sonic.Marshal(convAppendJSON{Message: toConvMessageJSON(&r.Message),
				Conversation: toConversationJSON(&r.Conversation), LeafMoved: r.LeafMoved})
		})
	if err != nil {
		return conversationError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusCreated)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
	return nil
}

// convAppendInput is a validated append. Encoded with sonic it is the
// canonical form an Idempotency-Key's request is compared by.
type convAppendInput struct {
	Role         string          `json:"role"`
	Content      string          `json:"content"`
	Status       string          `json:"status"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	FileIDs      []string        `json:"file_ids"`
	ParentID     *string         `json:"parent_id"`
	Root         bool            `json:"root"`
	ExpectedLeaf *string         `json:"expected_leaf"`
}

// convToolCallJSON is a tool call in the shape chat returns.
type convToolCallJSON struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// parseConvAppend validates an append body: roles, content, status, the tool
// fields (tool_calls only on assistant messages, tool_call_id required on
// tool messages and nowhere else), file_ids (user messages, the version pin,
// the files scope, 20 distinct) and the tree fields.
func parseConvAppend(body []byte, c *hotpath.Call) (*convAppendInput, *codec.Error) {
	f, cerr := parseConvFields(body)
	if cerr != nil {
		return nil, cerr
	}
	in := &convAppendInput{Status: "complete"}
	role, cerr := f.str("role")
	if cerr != nil {
		return nil, cerr
	}
	if role == nil {
		return nil, convInvalid("role: required; one of system, user, assistant or tool.")
	}
	switch *role {
	case "system", "user", "assistant", "tool":
		in.Role = *role
	default:
		return nil, convInvalid("role: must be system, user, assistant or tool.")
	}
	if f.given("tool_calls") {
		if in.Role != "assistant" {
			return nil, convInvalid("tool_calls: only an assistant message may carry tool_calls.")
		}
		var calls []convToolCallJSON
		if err := sonic.Unmarshal(f["tool_calls"], &calls); err != nil {
			return nil, convInvalid("tool_calls: must be an array of tool calls, each {id, type: function, function: {name, arguments}}.")
		}
		for i := range calls {
			tc := &calls[i]
			at := "tool_calls[" + strconv.Itoa(i) + "]"
			switch {
			case tc.ID == "" || strings.IndexByte(tc.ID, 0) >= 0 || len(tc.ID) > convToolCallIDMax:
				return nil, convInvalid(at + ".id: required, a string of 1 to " + strconv.Itoa(convToolCallIDMax) + " bytes.")
			case tc.Type != "function":
				return nil, convInvalid(at + `.type: must be "function".`)
			case tc.Function.Name == "" || strings.IndexByte(tc.Function.Name, 0) >= 0:
				return nil, convInvalid(at + ".function.name: required.")
			case strings.IndexByte(tc.Function.Arguments, 0) >= 0:
				return nil, convInvalid(at + ".function.arguments: must not contain NUL characters.")
			}
		}
		if len(calls) > 0 {
			raw, err := sonic.Marshal(calls)
			if err != nil {
				return nil, convInvalid("tool_calls: cannot be stored.")
			}
			in.ToolCalls = raw
		}
	}
	toolCallID, cerr := f.str("tool_call_id")
	if cerr != nil {
		return nil, cerr
	}
	switch {
	case in.Role == "tool" && (toolCallID == nil || *toolCallID == ""):
		return nil, convInvalid("tool_call_id: required on a tool message; copy the id of the call it answers.")
	case in.Role != "tool" && toolCallID != nil:
		return nil, convInvalid("tool_call_id: only a tool message may carry tool_call_id.")
	case toolCallID != nil && len(*toolCallID) > convToolCallIDMax:
		return nil, convInvalid("tool_call_id: at most " + strconv.Itoa(convToolCallIDMax) + " bytes.")
	}
	in.ToolCallID = toolCallID
	content, cerr := f.str("content")
	if cerr != nil {
		return nil, cerr
	}
	switch {
	case content != nil && *content != "":
		in.Content = *content
	case in.Role == "assistant" && in.ToolCalls != nil:
		// an assistant message that only calls tools may have no content
	default:
		return nil, convInvalid("content: required and non-empty (only an assistant message with tool_calls may leave it empty).")
	}
	status, cerr := f.str("status")
	if cerr != nil {
		return nil, cerr
	}
	if status != nil {
		switch *status {
		case "complete", "incomplete", "cancelled":
			in.Status = *status
		default:
			return nil, convInvalid("status: must be complete, incomplete or cancelled.")
		}
	}
	files, cerr := f.strings("file_ids")
	if cerr != nil {
		return nil, cerr
	}
	in.FileIDs = []string{}
	if len(files) > 0 {
		switch {
		case in.Role != "user":
			return nil, convInvalid("file_ids: only a user message may carry file_ids.")
		case !c.Pinned || c.Version < codec.VersionMessageFileIDs:
			return nil, errConvFileIDsPin
		case !c.User.Scopes.Has(hotpath.FamilyFiles):
			return nil, errConvFileIDsScope
		}
		seen := make(map[string]bool, len(files))
		for _, id := range files {
			if id == "" || len(id) > convFileIDMax {
				return nil, convInvalid("file_ids: each id is a string of 1 to " + strconv.Itoa(convFileIDMax) + " bytes.")
			}
			// One file in any case: counted once toward the bound, as it
			// is stored once.
			storage.CanonUUID(&id)
			if !seen[id] {
				seen[id] = true
				in.FileIDs = append(in.FileIDs, id)
			}
		}
		if len(in.FileIDs) > convFilesMax {
			return nil, convInvalid("file_ids: at most " + strconv.Itoa(convFilesMax) + " distinct files per message.")
		}
	}
	if in.Root, cerr = f.boolean("root"); cerr != nil {
		return nil, cerr
	}
	if in.ParentID, cerr = f.str("parent_id"); cerr != nil {
		return nil, cerr
	}
	if in.Root && in.ParentID != nil {
		return nil, convInvalid("root: a new root answers nothing; send root or parent_id, not both.")
	}
	if in.ParentID != nil && !storage.CanonUUID(in.ParentID) {
		return nil, convInvalid("parent_id: not a message of this conversation.")
	}
	if in.ExpectedLeaf, cerr = f.str("expected_leaf"); cerr != nil {
		return nil, cerr
	}
	if in.ExpectedLeaf != nil && !storage.CanonUUID(in.ExpectedLeaf) {
		return nil, convInvalid("expected_leaf: not a message of this conversation.")
	}
	return in, nil
}

// switchConversationBranch makes the branch through message_id the active one.
func (a *API) switchConversationBranch(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	msg, cerr := f.str("message_id")
	if cerr != nil {
		return cerr
	}
	if msg == nil {
		return convInvalid("message_id: required; the message whose branch becomes the active one.")
	}
	storage.CanonUUID(msg)
	qctx, cancel := queryContext()
	defer cancel()
	leaf, err := a.DB.SwitchBranch(qctx, c.User.UserID, c.User.OrgID, convID(ctx), *msg)
	if err != nil {
		return conversationError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]string{"leaf_id": leaf})
}

// searchConversations searches the text of the caller's conversations.
func (a *API) searchConversations(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cerr := convPageLimit("limit", convQueryArg(ctx, "limit"), convSearchDefault, convSearchMax)
	if cerr != nil {
		return cerr
	}
	source, cerr := convSource(convQueryArg(ctx, "source"))
	if cerr != nil {
		return cerr
	}
	q := string(ctx.QueryArgs().Peek("q"))
	if len(q) > convSearchQueryMax {
		return convInvalid("q: at most " + strconv.Itoa(convSearchQueryMax) + " bytes.")
	}
	// Any text is a query: bytes PostgreSQL cannot hold in text are dropped
	// rather than refused.
	q = strings.ReplaceAll(strings.ToValidUTF8(q, ""), "\x00", "")
	data := []convSearchHitJSON{}
	if strings.TrimSpace(q) != "" {
		qctx, cancel := queryContext()
		defer cancel()
		hits, err := a.DB.SearchMessages(qctx, c.User.UserID, c.User.OrgID, q, source, limit)
		if err != nil {
			return conversationError(err)
		}
		for i := range hits {
			h := &hits[i]
			data = append(data, convSearchHitJSON{Object: "conversation.search_hit", MessageID: h.MessageID,
				ConversationID: h.ConversationID, ConversationTitle: h.ConversationTitle, Archived: h.Archived,
				Role: h.Role, Sequence: h.Sequence, Snippet: h.Snippet, OnActivePath: h.OnActivePath, Rank: h.Rank,
				CreatedAt: convTime(h.CreatedAt)})
		}
	}
	return writeList(ctx, data)
}
