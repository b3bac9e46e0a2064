package control

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// me answers {api_key_id, user_id}: 200 means the key works.
func (a *API) me(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	return writeJSON(ctx, fasthttp.StatusOK, map[string]string{
		"api_key_id": c.User.KeyID,
		"user_id":    c.User.UserID,
	})
}

type serviceTokenSelf struct {
	Object        string   `json:"object"`
	ID            string   `json:"id"`
	Service       string   `json:"service"`
	AllowedScopes []string `json:"allowed_scopes"`
	ReadOnly      bool     `json:"read_only"`
	ExpiresAt     *string  `json:"expires_at"`
}

// serviceTokenSelf describes only the presented token. allowed_scopes is the
// effective list, never empty; expires_at is null for a token that never
// expires and never in the past (an expired token does not get this far).
func (a *API) serviceTokenSelf(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	s := c.Service
	out := serviceTokenSelf{Object: "service_token", ID: s.ID, Service: s.Name,
		AllowedScopes: s.Scopes.Names(), ReadOnly: s.ReadOnly}
	if s.ExpiresAt != 0 {
		t := time.Unix(s.ExpiresAt, 0).UTC().Format(time.RFC3339)
		out.ExpiresAt = &t
	}
	return writeJSON(ctx, fasthttp.StatusOK, out)
}

var errKeyNotFound = codec.NewError(codec.CodeNotFound, "No such key.")

func (a *API) listKeys(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	keys, err := a.DB.ListKeys(qctx, c.User.UserID, c.User.OrgID)
	if err != nil {
		return storageError(err, errKeyNotFound)
	}
	return writeList(ctx, keys)
}

type createKeyRequest struct {
	Scopes      []string `json:"allowed_scopes"`
	Models      []string `json:"models"`
	ReadOnly    bool     `json:"read_only"`
	SpendCapUSD *string  `json:"spend_cap_usd"`
}

// errLimitedKeyMints refuses a key with a spend cap or prepaid credit the
// minting of keys: each key it minted would have a cap of its own, so ten
// of them would spend ten times what the caller may.
var errLimitedKeyMints = codec.NewError(codec.CodeKeyScopeForbidden,
	"A key with a spend cap or prepaid credit cannot mint keys: each would spend beyond its limit.")

// createKey issues a developer key to the caller, bound to the caller's
// organization. A key never mints a broader key than itself: the new key's
// scopes and models must lie within the caller's, a read-only caller mints
// nothing, and neither does a key whose spending is bounded.
func (a *API) createKey(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	p := c.User
	if p.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	if p.SpendCapMicros >= 0 || p.CreditsMicros >= 0 || p.Kind == hotpath.KindHeadless {
		return errLimitedKeyMints
	}
	var req createKeyRequest
	if body := ctx.PostBody(); len(body) > 0 {
		if cerr := codec.DecodeRequest(body, &req); cerr != nil {
			return cerr
		}
	}
	scopes, err := hotpath.ParseScopes(req.Scopes)
	if err != nil {
		return codec.NewError(codec.CodeInvalidRequest, "allowed_scopes: "+err.Error())
	}
	if missing := scopes.Lacking(p.Scopes); missing != hotpath.FamilyNone {
		return &codec.Error{Code: codec.CodeKeyScopeForbidden,
			Message: "A key cannot mint a key with scopes it does not hold itself.",
			Detail:  codec.Detail{RequiredScope: missing.String()}}
	}
	for _, m := range req.Models {
		if !hotpath.IsTierName(m) {
			return codec.NewError(codec.CodeInvalidRequest, "models: "+strconv.Quote(m)+" is not a tier (kavi, vaani, mira)")
		}
		if !p.AllowsModel(m) {
			return codec.NewError(codec.CodeModelNotAllowed, "A key cannot mint a key for tiers it may not use itself.")
		}
	}
	models := req.Models
	if len(models) == 0 && len(p.Models) > 0 {
		models = p.Models
	}
	nk := storage.NewKey{UserID: p.UserID, OrgID: p.OrgID, Kind: hotpath.KindDeveloper, Scopes: scopes,
		Models: models, ReadOnly: req.ReadOnly, WorkspaceID: p.WorkspaceID}
	if req.SpendCapUSD != nil {
		micros, err := hotpath.ParseMicroUSD(*req.SpendCapUSD)
		if err != nil {
			return codec.NewError(codec.CodeInvalidRequest, "spend_cap_usd: "+err.Error())
		}
		nk.SpendCapMicros = &micros
	}
	qctx, cancel := queryContext()
	defer cancel()
	issued, err := a.DB.CreateKey(qctx, nk)
	if err != nil {
		return storageError(err, errKeyNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusCreated, issued)
}

// revokeKey revokes one of the caller's developer or headless keys in the
// caller's organization. The key is dropped from this process's cache before
// the answer goes out, so the very next request with it is refused here; the
// other processes hear of it through PostgreSQL.
func (a *API) revokeKey(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if c.User.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	id, _ := ctx.UserValue("id").(string)
	qctx, cancel := queryContext()
	defer cancel()
	if kind, err := a.DB.OwnKeyKind(qctx, id, c.User.UserID, c.User.OrgID); err == nil && kind == hotpath.KindSignedIn {
		return errSignedInNotRevocable
	}
	h, err := a.DB.RevokeOwnKey(qctx, id, c.User.UserID, c.User.OrgID)
	if errors.Is(err, storage.ErrNotFound) {
		return errKeyNotFound
	}
	if err != nil {
		return err
	}
	a.keysChanged(h)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// errKeyNotRotatable refuses rotating anything but a live developer key.
var errKeyNotRotatable = codec.NewError(codec.CodeInvalidRequest,
	"Only a live developer key can be rotated; a signed-in credential is not rotated by its holder.")

// rotateKey gives one of the caller's developer keys a new secret: the same
// id, restrictions and workspace. The old secret is dropped from every
// process's cache before the answer (fleetSees). The new secret is shown
// once.
func (a *API) rotateKey(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if c.User.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	qctx, cancel := queryContext()
	defer cancel()
	id := pathParam(ctx, "id")
	var presented *hotpath.TokenHash
	if strings.EqualFold(id, c.User.KeyID) {
		if token, ok := codec.ParseBearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)); ok {
			h := hotpath.HashToken(token)
			presented = &h
		}
	}
	issued, old, err := a.DB.RotateOwnKey(qctx, id, c.User.UserID, c.User.OrgID, presented)
	switch {
	case errors.Is(err, storage.ErrKeySuperseded):
		// Sent with a secret another rotation has just replaced: refused
		// as that secret is from now on.
		return codec.ErrUnauthorized
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrNotMember):
		return errKeyNotFound
	case errors.Is(err, storage.ErrKeyNotRotatable):
		return errKeyNotRotatable
	case err != nil:
		return err
	}
	a.keysChanged(old)
	return writeJSON(ctx, fasthttp.StatusOK, issued)
}
