package control

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/memory"
	"github.com/edgegw/gateway/hotpath/pii"
	"github.com/edgegw/gateway/storage"
)

// Bounds of the memory routes.
const (
	memoryKeyMax      = 128  // bytes
	memoryValueMax    = 2000 // characters
	memoryListDefault = 50
	memoryListMax     = 100
	// memoryEmbedTimeout bounds the gw-embed call of a manual write; past
	// it the memory is stored without a vector and recall finds it by its
	// words.
	memoryEmbedTimeout = 2 * time.Second
)

// Refusals of the memory routes.
var (
	ErrMemoryNotFound   = codec.NewError(codec.CodeMemoryNotFound, "No such memory.")
	ErrMemoryOrgWrite   = codec.NewError(codec.CodeOrgForbidden, "Only an owner or admin may write or delete organization memory.")
	ErrMemoryVaultWrite = codec.NewError(codec.CodeVaultForbidden, "You may read this vault's memory but not change it.")
	ErrDepartedNotFound = codec.NewError(codec.CodeUserNotFound, "No departed member with this id has memory to settle.")
	ErrMemoryFrozen     = codec.NewError(codec.CodeMemoryFrozen, "A departed member's memory is frozen until an owner or admin settles it with POST /api/v1/memories/departed/{user_id}.")
	errMemoryBadCursor  = convInvalid("cursor: not a cursor this list returned.")
)

func (a *API) registerMemories(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyMemory}
	}
	const base = "/api/v1/memories"
	r.Handle(fasthttp.MethodGet, base, access("memories_list"), a.listMemories)
	r.Handle(fasthttp.MethodPost, base, access("memories_write"), a.writeMemory)
	r.Handle(fasthttp.MethodDelete, base+"/{id}", access("memories_delete"), a.deleteMemory)
	r.Handle(fasthttp.MethodPost, base+"/departed/{user_id}", access("memories_departed"), a.settleDeparted)
}

func memoryError(err error) error {
	switch {
	case errors.Is(err, storage.ErrMemoryNotFound):
		return ErrMemoryNotFound
	case errors.Is(err, storage.ErrMemoryFrozen):
		return ErrMemoryFrozen
	case errors.Is(err, storage.ErrForbidden):
		return ErrMemoryOrgWrite
	case errors.Is(err, storage.ErrVaultForbidden):
		return ErrMemoryVaultWrite
	case errors.Is(err, storage.ErrVaultNotFound):
		return ErrVaultNotFound
	case errors.Is(err, storage.ErrBadCursor):
		return errMemoryBadCursor
	}
	return storageError(err, ErrMemoryNotFound)
}

// memoryScopeArg reads a scope filter or field value.
func memoryScopeArg(name, s string) *codec.Error {
	switch s {
	case memory.ScopePersonal, memory.ScopeOrg, memory.ScopeVault:
		return nil
	}
	return convInvalid(name + ": must be personal, org or vault.")
}

func (a *API) listMemories(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	limit, cerr := convPageLimit("limit", convQueryArg(ctx, "limit"), memoryListDefault, memoryListMax)
	if cerr != nil {
		return cerr
	}
	f := storage.MemoryFilter{Limit: limit + 1, Cursor: string(convQueryArg(ctx, "cursor"))}
	if raw := convQueryArg(ctx, "scope"); raw != nil {
		if cerr := memoryScopeArg("scope", string(raw)); cerr != nil {
			return cerr
		}
		f.Scope = string(raw)
	}
	caller := memory.Caller{OrgID: c.User.OrgID, UserID: c.User.UserID}
	if raw := convQueryArg(ctx, "vault_id"); raw != nil {
		caller.VaultID = string(raw)
		if caller.VaultID == "" {
			return ErrVaultNotFound
		}
	}
	qctx, cancel := queryContext()
	defer cancel()
	ms, err := a.DB.ListMemories(qctx, caller, f)
	if err != nil {
		return memoryError(err)
	}
	var next any
	if len(ms) > limit {
		ms = ms[:limit]
		next = storage.MemoryCursor(ms[limit-1])
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "list", "data": ms, "next_cursor": next})
}

// writeMemory stores a memory written by hand. Content carrying personal
// data is dropped before any write, as capture drops it: the answer says
// nothing was stored, which field carried what kind of data, and never
// echoes it.
func (a *API) writeMemory(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	w := storage.MemoryWrite{Scope: memory.ScopePersonal, Source: "manual"}
	// The bounds apply to what is stored: the text after trimming.
	key, cerr := f.str("key")
	if cerr != nil {
		return cerr
	}
	if key != nil {
		w.Key = strings.TrimSpace(*key)
	}
	if w.Key == "" || len(w.Key) > memoryKeyMax {
		return convInvalid("key: required, 1 to " + strconv.Itoa(memoryKeyMax) + " bytes, not blank.")
	}
	value, cerr := f.str("value")
	if cerr != nil {
		return cerr
	}
	if value != nil {
		w.Value = strings.TrimSpace(*value)
	}
	if w.Value == "" || utf8.RuneCountInString(w.Value) > memoryValueMax {
		return convInvalid("value: required, 1 to " + strconv.Itoa(memoryValueMax) + " characters, not blank.")
	}
	if s, cerr := f.str("scope"); cerr != nil {
		return cerr
	} else if s != nil {
		if cerr := memoryScopeArg("scope", *s); cerr != nil {
			return cerr
		}
		w.Scope = *s
	}
	vault, cerr := f.str("vault_id")
	if cerr != nil {
		return cerr
	}
	switch {
	case w.Scope == memory.ScopeVault && vault == nil:
		return convInvalid("vault_id: required with scope vault.")
	case w.Scope != memory.ScopeVault && vault != nil:
		return convInvalid("vault_id: only with scope vault.")
	case vault != nil:
		w.VaultID = *vault
	}
	for _, field := range []struct{ name, text string }{{"key", w.Key}, {"value", w.Value}} {
		if cat, _, found := pii.Find(field.text); found {
			return writeJSON(ctx, fasthttp.StatusOK, map[string]any{
				"object": "memory.write", "stored": false, "reason": "pii_detected",
				"category": string(cat), "field": field.name,
			})
		}
	}
	if a.Embed != nil {
		ectx, cancel := context.WithTimeout(context.Background(), memoryEmbedTimeout)
		vs, err := a.Embed.Embed(ectx, []string{w.Key + ": " + w.Value})
		cancel()
		if err == nil && len(vs) == 1 {
			w.Vector = vs[0]
		}
	}
	qctx, cancel := queryContext()
	defer cancel()
	m, err := a.DB.WriteMemory(qctx, c.User.OrgID, c.User.UserID, w)
	if err != nil {
		return memoryError(err)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, map[string]any{"object": "memory.write", "stored": true, "memory": m})
}

func (a *API) deleteMemory(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.DeleteMemory(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id")); err != nil {
		return memoryError(err)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// settleDeparted decides keep or purge for a departed member's frozen
// memory: owner or admin, checked before anything in the request.
func (a *API) settleDeparted(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := manages(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	d, cerr := f.str("decision")
	if cerr != nil {
		return cerr
	}
	if d == nil || (*d != "keep" && *d != "purge") {
		return convInvalid(`decision: required, "keep" or "purge".`)
	}
	qctx, cancel := queryContext()
	defer cancel()
	s, err := a.DB.SettleDeparted(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "user_id"), *d)
	switch {
	case errors.Is(err, storage.ErrForbidden):
		return ErrOrgForbidden
	case errors.Is(err, storage.ErrNotFound):
		return ErrDepartedNotFound
	case errors.Is(err, storage.ErrSettled):
		return convInvalid("decision: this member's memory is already settled the other way; a settlement is final.")
	case err != nil:
		return storageError(err, ErrDepartedNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, s)
}
