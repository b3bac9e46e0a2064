package control

import (
	"errors"
	"net/mail"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/edgegw/gateway/codec"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// Refusals of the organization routes.
var (
	// ErrOrgForbidden refuses organization management to a caller who is
	// not an owner or admin, before any id in the request is looked at.
	ErrOrgForbidden = codec.NewError(codec.CodeOrgForbidden, "Only an owner or admin of the organization may do this.")
	// ErrOrgOwnerForbidden refuses granting owner to a caller who is not one.
	ErrOrgOwnerForbidden = codec.NewError(codec.CodeOrgForbidden, "Only an owner may grant the owner role.")
	// ErrOrgOwnerImmutable refuses any change to an owner's membership.
	ErrOrgOwnerImmutable = codec.NewError(codec.CodeOrgForbidden,
		"An owner's membership cannot be removed, demoted or left.")
	// ErrOrgMemberNotFound answers a user id that is malformed, unknown or
	// not a member of the organization, and an organization the caller
	// does not belong to.
	ErrOrgMemberNotFound = codec.NewError(codec.CodeOrgMemberNotFound, "No such member of the organization.")
	// ErrOrgMemberExists is the one distinguishable outcome of an invite.
	ErrOrgMemberExists = codec.NewError(codec.CodeOrgMemberExists, "The user is already a member of the organization.")
	// ErrInvitationNotFound answers every invitation that is not live and
	// the caller's to act on.
	ErrInvitationNotFound = codec.NewError(codec.CodeInvitationNotFound, "No such live invitation.")
)

// invitationListMax bounds GET /api/v1/org/invitations: the newest this many.
const invitationListMax = 500

// registerOrg adds the organization, invitation and membership routes.
func (a *API) registerOrg(r Registrar) {
	access := func(name string) hotpath.Access {
		return hotpath.Access{Name: name, Auth: hotpath.AuthUser, Family: hotpath.FamilyOrg}
	}
	r.Handle(fasthttp.MethodGet, "/api/v1/org/members", access("org_members_list"), a.listMembers)
	r.Handle(fasthttp.MethodDelete, "/api/v1/org/members/{user_id}", access("org_members_remove"), a.removeMember)
	r.Handle(fasthttp.MethodPatch, "/api/v1/org/members/{user_id}", access("org_members_role"), a.setMemberRole)
	r.Handle(fasthttp.MethodGet, "/api/v1/org/memberships", access("org_memberships_list"), a.listMemberships)
	r.Handle(fasthttp.MethodDelete, "/api/v1/org/memberships/{org_id}", access("org_memberships_leave"), a.leaveOrg)
	r.Handle(fasthttp.MethodGet, "/api/v1/org/invitations", access("org_invitations_list"), a.listInvitations)
	r.Handle(fasthttp.MethodPost, "/api/v1/org/invitations", access("org_invitations_create"), a.invite)
	r.Handle(fasthttp.MethodDelete, "/api/v1/org/invitations/{id}", access("org_invitations_revoke"), a.revokeInvitation)
	r.Handle(fasthttp.MethodGet, "/api/v1/invitations", access("invitations_pending"), a.pendingInvitations)
	r.Handle(fasthttp.MethodPost, "/api/v1/invitations/{id}/accept", access("invitations_accept"), a.acceptInvitation)
	r.Handle(fasthttp.MethodPost, "/api/v1/invitations/{id}/decline", access("invitations_decline"), a.declineInvitation)
}

// manages is the authority check that comes before anything in the request
// is examined. The cached role is kept true by the membership trigger; the
// writes re-read it under lock.
func manages(c *hotpath.Call) error {
	if r := c.User.Role; r != hotpath.RoleOwner && r != hotpath.RoleAdmin {
		return ErrOrgForbidden
	}
	return nil
}

// writable refuses a write with a read-only key.
func writable(c *hotpath.Call) error {
	if c.User.ReadOnly {
		return codec.ErrKeyReadOnly
	}
	return nil
}

// orgError maps the organization queries' errors to their codes.
func orgError(err error, notFound *codec.Error) error {
	switch {
	case errors.Is(err, storage.ErrForbidden):
		return ErrOrgForbidden
	case errors.Is(err, storage.ErrOwnerImmutable):
		return ErrOrgOwnerImmutable
	case errors.Is(err, storage.ErrConflict):
		return ErrOrgMemberExists
	}
	return storageError(err, notFound)
}

func (a *API) listMembers(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := manages(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	members, err := a.DB.ListMembers(qctx, c.User.OrgID)
	if err != nil {
		return err
	}
	return writeList(ctx, members)
}

func pathParam(ctx *fasthttp.RequestCtx, name string) string {
	s, _ := ctx.UserValue(name).(string)
	return s
}

// removeMember ends a membership: the member's keys bound to the
// organization are revoked in the same transaction and dropped from this
// process's cache before the answer; other processes hear of it through
// PostgreSQL.
func (a *API) removeMember(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := manages(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	d, err := a.DB.RemoveMember(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "user_id"))
	if err != nil {
		return orgError(err, ErrOrgMemberNotFound)
	}
	a.keysChanged(d.Revoked...)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) setMemberRole(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
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
	s, cerr := f.str("role")
	if cerr != nil {
		return cerr
	}
	if s == nil {
		return convInvalid("role: required (owner, admin or member).")
	}
	role, err := hotpath.ParseRole(*s)
	if err != nil {
		return convInvalid("role: must be owner, admin or member.")
	}
	if role == hotpath.RoleOwner && c.User.Role != hotpath.RoleOwner {
		return ErrOrgOwnerForbidden
	}
	qctx, cancel := queryContext()
	defer cancel()
	m, err := a.DB.SetMemberRole(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "user_id"), role)
	if errors.Is(err, storage.ErrForbidden) && role == hotpath.RoleOwner {
		return ErrOrgOwnerForbidden
	}
	if err != nil {
		return orgError(err, ErrOrgMemberNotFound)
	}
	// The member's keys carry the new role from their next request, on
	// every process.
	a.allKeysChanged()
	return writeJSON(ctx, fasthttp.StatusOK, m)
}

func (a *API) listMemberships(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	orgs, err := a.DB.ListMemberships(qctx, c.User.UserID)
	if err != nil {
		return err
	}
	return writeList(ctx, orgs)
}

// leaveOrg ends the caller's own membership of the organization in the
// path (any the caller belongs to, not only the key's) and revokes the
// caller's keys bound to it, this one included when it is bound there.
func (a *API) leaveOrg(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	d, err := a.DB.RemoveMember(qctx, pathParam(ctx, "org_id"), c.User.UserID, c.User.UserID)
	if err != nil {
		return orgError(err, ErrOrgMemberNotFound)
	}
	a.keysChanged(d.Revoked...)
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) listInvitations(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := manages(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	invs, err := a.DB.ListInvitations(qctx, c.User.OrgID, invitationListMax)
	if err != nil {
		return err
	}
	return writeList(ctx, invs)
}

// invite issues an invitation: 202 with the invitation, the same body and
// the same queries whether or not the address names an account. The message
// goes to the outbox in the invitation's transaction.
func (a *API) invite(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
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
	email, cerr := f.str("email")
	if cerr != nil {
		return cerr
	}
	userID, cerr := f.str("user_id")
	if cerr != nil {
		return cerr
	}
	if (email == nil) == (userID == nil) {
		return convInvalid("Send exactly one of email and user_id.")
	}
	n := storage.NewInvitation{OrgID: c.User.OrgID, InviterID: c.User.UserID, Role: hotpath.RoleMember}
	if email != nil {
		addr, err := mail.ParseAddress(*email)
		if err != nil || addr.Address != strings.TrimSpace(*email) || len(addr.Address) > 320 {
			return convInvalid("email: must be a bare e-mail address (name@example.com).")
		}
		n.Email = addr.Address
	} else {
		if !storage.ValidUUID(*userID) {
			return convInvalid("user_id: must be a user id (a UUID).")
		}
		n.UserID = *userID
	}
	role, cerr := f.str("role")
	if cerr != nil {
		return cerr
	}
	if role != nil {
		switch r := hotpath.Role(*role); r {
		case hotpath.RoleAdmin, hotpath.RoleMember:
			n.Role = r
		case hotpath.RoleOwner:
			return convInvalid("role: an invitation cannot grant owner; invite as admin or member.")
		default:
			return convInvalid("role: must be admin or member.")
		}
	}
	qctx, cancel := queryContext()
	defer cancel()
	inv, err := a.DB.Invite(qctx, n, a.composeInvitation)
	if err != nil {
		return orgError(err, ErrOrgMemberNotFound)
	}
	if a.Outbox != nil {
		a.Outbox.Wake()
	}
	return writeJSON(ctx, fasthttp.StatusAccepted, inv)
}

func (a *API) revokeInvitation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := manages(c); err != nil {
		return err
	}
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if err := a.DB.RevokeInvitation(qctx, c.User.OrgID, c.User.UserID, pathParam(ctx, "id")); err != nil {
		return orgError(err, ErrInvitationNotFound)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

func (a *API) pendingInvitations(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	qctx, cancel := queryContext()
	defer cancel()
	invs, err := a.DB.PendingInvitations(qctx, c.User.UserID)
	if err != nil {
		return err
	}
	return writeList(ctx, invs)
}

// acceptInvitation makes the caller a member: only the invitee, whose
// account e-mail (verified at sign-in) or user id the invitation names.
func (a *API) acceptInvitation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	org, err := a.DB.SettleInvitation(qctx, pathParam(ctx, "id"), c.User.UserID, true)
	if err != nil {
		return storageError(err, ErrInvitationNotFound)
	}
	return writeJSON(ctx, fasthttp.StatusOK, map[string]any{"object": "membership", "org": org})
}

func (a *API) declineInvitation(ctx *fasthttp.RequestCtx, c *hotpath.Call) error {
	if err := writable(c); err != nil {
		return err
	}
	qctx, cancel := queryContext()
	defer cancel()
	if _, err := a.DB.SettleInvitation(qctx, pathParam(ctx, "id"), c.User.UserID, false); err != nil {
		return storageError(err, ErrInvitationNotFound)
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}
