package control

import (
	"errors"
	"strconv"

	"github.com/bytedance/sonic"
	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Refusals of the workspace routes.
var (
	ErrWorkspaceForbidden = codec.NewError(codec.CodeWorkspaceForbidden, "Only an owner or admin may manage workspaces.")
	ErrWorkspaceNotFound  = codec.NewError(codec.CodeWorkspaceNotFound, "No such workspace.")
	ErrWorkspaceSlugTaken = codec.NewError(codec.CodeWorkspaceSlugExists, "A workspace with this slug already exists.")
	ErrWorkspaceNotEmpty  = codec.NewError(codec.CodeWorkspaceNotEmpty,
		"The workspace holds or has held a credential and cannot be deleted.")
	ErrWorkspaceIsDefault = codec.NewError(codec.CodeWorkspaceIsDefault, "The default workspace cannot be deleted.")
)

// nameMax bounds workspace and prompt names, in bytes.
const nameMax = 128

func (a *API) registerWorkspaces(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyWorkspaces}
	}
	const base = "/api/v1/workspaces"
	r.Handle(fasthttp.MethodGet, base, access("workspaces_list"), a.listWorkspaces)
	r.Handle(fasthttp.MethodPost, base, access("workspaces_create"), a.createWorkspace)
	r.Handle(fasthttp.MethodGet, base+"/{id}", access("workspaces_read"), a.readWorkspace)
	r.Handle(fasthttp.MethodPatch, base+"/{id}", access("workspaces_update"), a.updateWorkspace)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("workspaces_delete"), a.deleteWorkspace)
}

// managesWorkspaces is the authority check, before any id is examined.
func managesWorkspaces(c *hotpath.Call) error {
	if r := c.User.Role; r != hotpath.RoleOwner && r != hotpath.RoleAdmin {
		return ErrWorkspaceForbidden
	}
	return nil
}

func workspaceError(err error) error {
	switch {
	case errors.Is(err, storage.ErrConflict):
		return ErrWorkspaceSlugTaken
	case errors.Is(err, storage.ErrWorkspaceIsDefault):
		return ErrWorkspaceIsDefault
	case errors.Is(err, storage.ErrWorkspaceNotEmpty):
		return ErrWorkspaceNotEmpty
	}
	return storageError(err, ErrWorkspaceNotFound)
}

// checkName checks a workspace or prompt name.
func checkName(s *string) *codec.Error {
	if s == nil {
		return convInvalid("name: required, 1 to " + strconv.Itoa(nameMax) + " bytes.")
	}
	if len(*s) < 1 || len(*s) > nameMax {
		return convInvalid("name: must be 1 to " + strconv.Itoa(nameMax) + " bytes.")
	}
	return nil
}

// slugFor returns the slug sent, or the one derived from name. A slug sent
// must already be in derived form; a name with no usable characters needs
// one.
func slugFor(f convFields, name string) (string, *codec.Error) {
	s, cerr := f.str("slug")
	if cerr != nil {
		return "", cerr
	}
	if s == nil {
		slug := storage.Slugify(name)
		if slug == "" {
			return "", convInvalid("slug: the name has no letters or digits to derive a slug from; send a slug.")
		}
		return slug, nil
	}
	if *s == "" || storage.Slugify(*s) != *s || len(*s) > nameMax {
		return "", convInvalid("slug: lowercase letters and digits in runs joined by single hyphens, at most " +
			strconv.Itoa(nameMax) + " bytes.")
	}
	return *s, nil
}

// spendCap reads spend_cap_micros: nil for null; a positive integer otherwise.
func spendCap(f convFields) (*int64, *codec.Error) {
	if !f.given("spend_cap_micros") {
		return nil, nil
	}
	var n int64
	raw := f["spend_cap_micros"]
	if err := sonic.Unmarshal(raw, &n); err != nil || n <= 0 || strconv.FormatInt(n, 10) != string(raw) {
		return nil, convInvalid("spend_cap_micros: must be a positive integer (micro-USD) or null.")
	}
	return &n, nil
}

func (a *API) listWorkspaces(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := managesWorkspaces(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	ws, err := a.DB.ListWorkspaces(qctx, c.User.OrgID)
	if err != nil {
		return err
	}
	return writeList(ctx, ws)
}

func (a *API) createWorkspace(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := managesWorkspaces(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
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
	if slug == "default" {
		return convInvalid("slug: default is reserved for the organization's default workspace.")
	}
	capMicros, cerr := spendCap(f)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	w, err := a.DB.CreateWorkspace(qctx, c.User.OrgID, *name, slug, capMicros)
	if err != nil {
		return workspaceError(err)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, w)
}

func (a *API) readWorkspace(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := managesWorkspaces(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	w, err := a.DB.GetWorkspace(qctx, c.User.OrgID, pathParam(ctx, "id"))
	if err != nil {
		return workspaceError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, w)
}

// updateWorkspace renames and/or sets or clears the cap; the slug never
// changes. A cap change applies from the next request in every process.
func (a *API) updateWorkspace(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := managesWorkspaces(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	if f.present("slug") {
		return convInvalid("slug: a workspace's slug never changes; a patch takes name and spend_cap_micros.")
	}
	var p storage.WorkspacePatch
	if f.present("name") {
		name, cerr := f.str("name")
		if cerr != nil {
			return cerr
		}
		if cerr := checkName(name); cerr != nil {
			return cerr
		}
		p.Name = name
	}
	if p.SetCap = f.present("spend_cap_micros"); p.SetCap {
		if p.Cap, cerr = spendCap(f); cerr != nil {
			return cerr
		}
	}
	if p.Name == nil && !p.SetCap {
		return convInvalid("Send at least one of name and spend_cap_micros; an empty patch changes nothing.")
	}
	qctx, cancel := queryContext()
	defer cancel()
	w, err := a.DB.UpdateWorkspace(qctx, c.User.OrgID, pathParam(ctx, "id"), p)
	if err != nil {
		return workspaceError(err)
	}
	if p.SetCap {
		// Keys of the workspace carry the new cap from their next request,
		// on every process.
		a.allKeysChanged()
	}
	return writeJSON(ctx, fasthttp.StatusOK, w)
}

func (a *API) deleteWorkspace(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := managesWorkspaces(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteWorkspace(qctx, c.User.OrgID, pathParam(ctx, "id")); err != nil {
		return workspaceError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}
