package control

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Refusals of the prompt routes.
var (
	ErrPromptNotFound        = codec.NewError(codec.CodePromptNotFound, "No such prompt in this workspace.")
	ErrPromptVersionNotFound = codec.NewError(codec.CodePromptVersionNotFound, "The prompt has no such version.")
	ErrPromptSlugTaken       = codec.NewError(codec.CodePromptSlugExists, "A prompt with this slug already exists in the workspace.")
	errPromptCursor          = convInvalid("cursor: not a cursor this route issued.")
)

// Bounds of the prompt routes.
const (
	promptContentMax   = 102400 // bytes of one version's content
	promptListMax      = 1000   // prompts in one listing
	promptVersionsPage = 20     // default versions page
	promptVersionsMax  = 100    // largest versions page
)

func (a *API) registerPrompts(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyPrompts}
	}
	const base = "/api/v1/prompts"
	r.Handle(fasthttp.MethodGet, base, access("prompts_list"), a.listPrompts)
	r.Handle(fasthttp.MethodPost, base, access("prompts_create"), a.createPrompt)
	r.Handle(fasthttp.MethodGet, base+"/{id}", access("prompts_read"), a.readPrompt)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("prompts_delete"), a.deletePrompt)
	r.Handle(fasthttp.MethodGet, base+"/{id}/versions", access("prompts_versions"), a.listPromptVersions)
	r.Handle(fasthttp.MethodPost, base+"/{id}/versions", access("prompts_append"), a.appendPromptVersion)
}

func promptError(err error) error {
	switch {
	case errors.Is(err, storage.ErrConflict):
		return ErrPromptSlugTaken
	case errors.Is(err, storage.ErrPromptVersionNotFound):
		return ErrPromptVersionNotFound
	}
	return storageError(err, ErrPromptNotFound)
}

// promptContent reads content: required, 1 to 102400 bytes, kept verbatim.
func promptContent(f convFields) (string, *codec.Error) {
	s, cerr := f.str("content")
	if cerr != nil {
		return "", cerr
	}
	if s == nil || len(*s) < 1 || len(*s) > promptContentMax {
		return "", &codec.Error{Code: codec.CodeInvalidRequest,
			Message: "content: required, 1 to " + strconv.Itoa(promptContentMax) + " bytes.",
			Detail:  codec.Detail{Limit: promptContentMax, HasLimit: true}}
	}
	return *s, nil
}

// The prompt routes act in the workspace the credential names: its own, or
// its organization's default.
func (a *API) listPrompts(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	ps, err := a.DB.ListPrompts(qctx, c.User.WorkspaceID, promptListMax)
	if err != nil {
		return err
	}
	return writeList(ctx, ps)
}

func (a *API) createPrompt(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	if f.present("workspace_id") {
		return convInvalid("workspace_id: a prompt lives in the workspace of the key that creates it.")
	}
	name, cerr := f.str("name")
	if cerr != nil {
		return cerr
	}
	if cerr := checkName(name); cerr != nil {
		return cerr
	}
	slug, cerr := slugFor(f, *name)
	if cerr != nil {
		return cerr
	}
	content, cerr := promptContent(f)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	p, err := a.DB.CreatePrompt(qctx, storage.NewPrompt{OrgID: c.User.OrgID, WorkspaceID: c.User.WorkspaceID,
		AuthorID: c.User.UserID, Name: *name, Slug: slug, Content: content})
	if err != nil {
		return promptError(err)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, p)
}

func (a *API) readPrompt(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	version := 0
	if raw := ctx.QueryArgs().Peek("version"); raw != nil {
		n, err := strconv.Atoi(string(raw))
		if errors.Is(err, strconv.ErrRange) && n > 0 {
			// Too large for an int is still a version number the prompt
			// cannot have: storage answers it as not found.
			err = nil
		}
		if err != nil || n < 1 {
			return convInvalid("version: must be a positive integer.")
		}
		version = n
	}
	qctx, cancel := queryContext()
	defer cancel()
	p, err := a.DB.GetPrompt(qctx, c.User.WorkspaceID, pathParam(ctx, "id"), version)
	if err != nil {
		return promptError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, p)
}

func (a *API) deletePrompt(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeletePrompt(qctx, c.User.WorkspaceID, pathParam(ctx, "id")); err != nil {
		return promptError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) appendPromptVersion(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	content, cerr := promptContent(f)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	v, err := a.DB.AppendPromptVersion(qctx, c.User.WorkspaceID, pathParam(ctx, "id"), c.User.UserID, content)
	if err != nil {
		return promptError(err)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, v)
}

// Version cursors are opaque: base64url of a kind byte and the last
// version number returned.
const promptCursorKind = 'v'

func encodePromptCursor(version int) string {
	b := binary.AppendUvarint([]byte{promptCursorKind}, uint64(version))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePromptCursor(s string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != promptCursorKind {
		return 0, false
	}
	v, n := binary.Uvarint(b[1:])
	// Versions are int4 in the database; a larger one was never issued.
	if n != len(b)-1 || v < 2 || v > math.MaxInt32 {
		return 0, false
	}
	return int(v), true
}

// listPromptVersions pages a prompt's versions newest first.
func (a *API) listPromptVersions(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	args := ctx.QueryArgs()
	limit, cerr := convPageLimit("limit", args.Peek("limit"), promptVersionsPage, promptVersionsMax)
	if cerr != nil {
		return cerr
	}
	before := 0
	if raw := args.Peek("cursor"); len(raw) > 0 {
		var ok bool
		if before, ok = decodePromptCursor(string(raw)); !ok {
			return errPromptCursor
		}
	}
	qctx, cancel := queryContext()
	defer cancel()
	vs, err := a.DB.ListPromptVersions(qctx, c.User.WorkspaceID, pathParam(ctx, "id"), before, limit+1)
	if err != nil {
		return promptError(err)
	}
	var next *string
	if len(vs) > limit {
		vs = vs[:limit]
		s := encodePromptCursor(vs[len(vs)-1].Version)
		next = &s
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": vs, "next_cursor": next})
}
