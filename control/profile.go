package control

import (
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// errProfileGone answers a credential whose membership ended between the
// key check and the query.
var errProfileGone = ErrOrgMemberNotFound

// registerProfile adds the profile routes; they need no scope.
func (a *API) registerProfile(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyNone}
	}
	r.Handle(fasthttp.MethodGet, "/api/v1/profile", access("profile_read"), a.readProfile)
	r.Handle(fasthttp.MethodPatch, "/api/v1/profile", access("profile_update"), a.updateProfile)
}

func (a *API) readProfile(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	p, err := a.DB.UpdateProfile(qctx, c.User.UserID, c.User.OrgID, storage.ProfilePatch{})
	if err != nil {
		return storageError(err, errProfileGone)
	}
	return writeJSON(ctx, fasthttp.StatusOK, p)
}

// updateProfile writes work_type and completed_onboarding when sent; id,
// email and any other field are ignored. Every field is checked before
// anything is written.
func (a *API) updateProfile(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	f, cerr := parseConvFields(ctx.PostBody())
	if cerr != nil {
		return cerr
	}
	var p storage.ProfilePatch
	if f.present("work_type") {
		s, cerr := f.str("work_type")
		if cerr != nil {
			return cerr
		}
		if s == nil || !slices.Contains(storage.WorkTypes, *s) {
			return convInvalid("work_type: must be one of " + strings.Join(storage.WorkTypes, ", ") + ".")
		}
		p.WorkType = s
	}
	if f.present("completed_onboarding") {
		if !f.given("completed_onboarding") {
			return convInvalid("completed_onboarding: must be a boolean.")
		}
		b, cerr := f.boolean("completed_onboarding")
		if cerr != nil {
			return cerr
		}
		p.CompletedOnboarding = &b
	}
	qctx, cancel := queryContext()
	defer cancel()
	out, err := a.DB.UpdateProfile(qctx, c.User.UserID, c.User.OrgID, p)
	if err != nil {
		return storageError(err, errProfileGone)
	}
	return writeJSON(ctx, fasthttp.StatusOK, out)
}
