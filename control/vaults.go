package control

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// The closed vocabularies of a vault's icon and color (the database holds
// the same lists as check constraints).
var (
	VaultIcons = []string{"folder", "book", "briefcase", "code", "flask", "globe", "heart", "home", "lightbulb",
		"lock", "music", "rocket", "shield", "star", "users", "wrench"}
	VaultColors = []string{"gray", "red", "orange", "amber", "yellow", "green", "teal", "blue", "indigo",
		"purple", "pink"}
)

// Bounds of a vault's fields.
const (
	vaultDescriptionMax = 2000 // characters
	vaultExternalIDMax  = 255  // bytes
)

// Refusals of the vault routes.
var (
	ErrVaultNoGrant = codec.NewError(codec.CodeVaultForbidden, "Your grant on this vault does not allow this operation.")
	ErrVaultOwner   = codec.NewError(codec.CodeVaultForbidden,
		"The vault owner's membership cannot be changed, held or removed.")
	ErrVaultNameTaken    = codec.NewError(codec.CodeVaultNameExists, "A vault with this name already exists in the organization.")
	ErrVaultExternalUsed = codec.NewError(codec.CodeVaultExternalIDConflict,
		"external_id: another member's vault already uses this external id.")
	ErrUserNotFound = codec.NewError(codec.CodeUserNotFound, "No such user in this organization or vault.")
)

func (a *API) registerVaults(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyVaults}
	}
	const base = "/api/v1/vaults"
	r.Handle(fasthttp.MethodGet, base, access("vaults_list"), a.listVaults)
	r.Handle(fasthttp.MethodPost, base, access("vaults_create"), a.createVault)
	r.Handle(fasthttp.MethodGet, base+"/{id}", access("vaults_read"), a.readVault)
	r.Handle(fasthttp.MethodPatch, base+"/{id}", access("vaults_update"), a.updateVault)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("vaults_delete"), a.deleteVault)
	r.Handle(fasthttp.MethodPut, base+"/{id}/archive", access("vaults_archive"), a.vaultFlag(a.DB.SetVaultArchived, true))
	r.Handle(fasthttp.MethodDelete, base+"/{id}/archive", access("vaults_restore"), a.vaultFlag(a.DB.SetVaultArchived, false))
	r.Handle(fasthttp.MethodPut, base+"/{id}/pin", access("vaults_pin"), a.vaultFlag(a.DB.SetVaultPinned, true))
	r.Handle(fasthttp.MethodDelete, base+"/{id}/pin", access("vaults_unpin"), a.vaultFlag(a.DB.SetVaultPinned, false))
	r.Handle(fasthttp.MethodGet, base+"/{id}/members", access("vault_members_list"), a.listVaultMembers)
	r.Handle(fasthttp.MethodPost, base+"/{id}/members", access("vault_members_add"), a.addVaultMember)
	r.Handle(fasthttp.MethodPatch, base+"/{id}/members/{user_id}", access("vault_members_update"), a.updateVaultMember)
	r.Handle(fasthttp.MethodDelete, base+"/{id}/members/{user_id}", access("vault_members_remove"), a.removeVaultMember)
	r.Handle(fasthttp.MethodPut, base+"/{id}/members/{user_id}/hold", access("vault_members_hold"), a.vaultHold(true))
	r.Handle(fasthttp.MethodDelete, base+"/{id}/members/{user_id}/hold", access("vault_members_release"), a.vaultHold(false))
}

func vaultError(err error) error {
	switch {
	case errors.Is(err, storage.ErrVaultNotFound):
		return ErrVaultNotFound
	case errors.Is(err, storage.ErrVaultForbidden):
		return ErrVaultNoGrant
	case errors.Is(err, storage.ErrOwnerImmutable):
		return ErrVaultOwner
	case errors.Is(err, storage.ErrConflict):
		return ErrVaultNameTaken
	case errors.Is(err, storage.ErrVaultExternalIDConflict):
		return ErrVaultExternalUsed
	case errors.Is(err, storage.ErrUserNotFound):
		return ErrUserNotFound
	}
	return storageError(err, ErrVaultNotFound)
}

// vaultVocab reads an optional field from a closed vocabulary.
func vaultVocab(f convFields, name string, vocab []string) (*string, *codec.Error) {
	s, cerr := f.str(name)
	if cerr != nil {
		return nil, cerr
	}
	if s != nil && !slices.Contains(vocab, *s) {
		return nil, convInvalid(name + ": must be one of " + strings.Join(vocab, ", ") + ", or null.")
	}
	return s, nil
}

// vaultFields reads and checks a create (patch false) or update body.
func vaultFields(body []byte, patch bool) (storage.VaultFields, *codec.Error) {
	var v storage.VaultFields
	f, cerr := parseConvFields(body)
	if cerr != nil {
		return v, cerr
	}
	if !patch || f.present("name") {
		if v.Name, cerr = f.str("name"); cerr != nil {
			return v, cerr
		}
		if cerr := checkName(v.Name); cerr != nil {
			return v, cerr
		}
	}
	if v.Description, cerr = f.str("description"); cerr != nil {
		return v, cerr
	}
	if v.Description != nil && utf8.RuneCountInString(*v.Description) > vaultDescriptionMax {
		return v, convInvalid("description: at most 2000 characters.")
	}
	if v.Icon, cerr = vaultVocab(f, "icon", VaultIcons); cerr != nil {
		return v, cerr
	}
	if v.Color, cerr = vaultVocab(f, "color", VaultColors); cerr != nil {
		return v, cerr
	}
	if f.present("memory_scope") {
		if v.MemoryScope, cerr = vaultVocab(f, "memory_scope", []string{"default", "vault_only"}); cerr != nil {
			return v, cerr
		}
		if v.MemoryScope == nil {
			return v, convInvalid("memory_scope: must be default or vault_only, never null.")
		}
	}
	v.SetDescription, v.SetIcon, v.SetColor = f.present("description"), f.present("icon"), f.present("color")
	if patch {
		if f.present("external_id") {
			return v, convInvalid("external_id: set only when the vault is created.")
		}
		if v.Name == nil && v.MemoryScope == nil && !v.SetDescription && !v.SetIcon && !v.SetColor {
			return v, convInvalid("Send at least one of name, description, icon, color and memory_scope; an empty patch changes nothing.")
		}
		return v, nil
	}
	if v.ExternalID, cerr = f.str("external_id"); cerr != nil {
		return v, cerr
	}
	if v.ExternalID != nil && (len(*v.ExternalID) < 1 || len(*v.ExternalID) > vaultExternalIDMax) {
		return v, convInvalid("external_id: must be 1 to 255 bytes.")
	}
	return v, nil
}

func (a *API) createVault(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := vaultFields(ctx.PostBody(), false)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	v, err := a.DB.CreateVault(qctx, c.User.OrgID, c.User.UserID, f)
	if err != nil {
		return vaultError(err)
	}
	status := fasthttp.StatusCreated
	if !*v.Created {
		status = fasthttp.StatusOK
	}
	return writeJSON(ctx, status, v)
}

func (a *API) listVaults(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	var f storage.VaultFilter
	switch raw := convQueryArg(ctx, "scope"); string(raw) {
	case "all", "owned", "shared":
		f.Scope = string(raw)
	default:
		if raw != nil {
			return convInvalid("scope: must be all, owned or shared.")
		}
		f.Scope = "all"
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
	qctx, cancel := queryContext()
	defer cancel()
	vs, err := a.DB.ListVaults(qctx, c.User.OrgID, c.User.UserID, f)
	if err != nil {
		return err
	}
	return writeList(ctx, vs)
}

func (a *API) readVault(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	v, err := a.DB.GetVault(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"))
	if err != nil {
		return vaultError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, v)
}

func (a *API) updateVault(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := vaultFields(ctx.PostBody(), true)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	v, err := a.DB.UpdateVault(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), f)
	if err != nil {
		return vaultError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, v)
}

func (a *API) deleteVault(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteVault(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id")); err != nil {
		return vaultError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// vaultFlag serves the idempotent archive/restore and pin/unpin pairs.
func (a *API) vaultFlag(set func(ctx context.Context, orgID, userID, vaultID string, on bool) error, on bool) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		if err := writable(c); err != nil {
			return err
		}
		qctx, cancel := queryContext()
		defer cancel()
		if err := set(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), on); err != nil {
			return vaultError(err)
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return nil
	}
}

func (a *API) listVaultMembers(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	ms, err := a.DB.ListVaultMembers(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"))
	if err != nil {
		return vaultError(err)
	}
	return writeList(ctx, ms)
}

// memberGrants reads can_read, can_write and can_share; held is refused
// (holds have their own route).
func memberGrants(f convFields) (storage.MemberGrants, *codec.Error) {
	var g storage.MemberGrants
	if f.present("held") {
		return g, convInvalid("held: not accepted here; hold and release a member with PUT and DELETE on its hold.")
	}
	for _, p := range []struct {
		name string
		dst  **bool
	}{{"can_read", &g.CanRead}, {"can_write", &g.CanWrite}, {"can_share", &g.CanShare}} {
		if !f.present(p.name) {
			continue
		}
		if !f.given(p.name) {
			return g, convInvalid(p.name + ": must be true or false.")
		}
		b, cerr := f.boolean(p.name)
		if cerr != nil {
			return g, cerr
		}
		*p.dst = &b
	}
	return g, nil
}

func (a *API) addVaultMember(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	user, cerr := f.str("user_id")
	if cerr != nil {
		return cerr
	}
	if user == nil {
		return convInvalid("user_id: required.")
	}
	g, cerr := memberGrants(f)
	if cerr != nil {
		return cerr
	}
	qctx, cancel := queryContext()
	defer cancel()
	m, created, err := a.DB.AddVaultMember(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), *user, g)
	if err != nil {
		return vaultError(err)
	}
	status := fasthttp.StatusOK
	if created {
		status = fasthttp.StatusCreated
	}
	return writeJSON(ctx, status, m)
}

func (a *API) updateVaultMember(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	g, cerr := memberGrants(f)
	if cerr != nil {
		return cerr
	}
	if g.CanRead == nil && g.CanWrite == nil && g.CanShare == nil {
		return convInvalid("Send at least one of can_read, can_write and can_share; an empty patch changes nothing.")
	}
	qctx, cancel := queryContext()
	defer cancel()
	m, err := a.DB.UpdateVaultMember(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), pathParam(ctx, "user_id"), g)
	if err != nil {
		return vaultError(err)
	}
	return writeJSON(ctx, fasthttp.StatusOK, m)
}

func (a *API) removeVaultMember(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.RemoveVaultMember(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), pathParam(ctx, "user_id")); err != nil {
		return vaultError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) vaultHold(held bool) func(*fasthttp.RequestCtx, *hotpath.Call) error {
	return func(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
		if err := writable(c); err != nil {
			return err
		}
		qctx, cancel := queryContext()
		defer cancel()
		err := a.DB.SetVaultMemberHeld(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id"), pathParam(ctx, "user_id"), held)
		if err != nil {
			return vaultError(err)
		}
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return nil
	}
}
