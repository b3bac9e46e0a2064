package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/storage"
)

// deviceDecision is what `gateway admin device approve|deny` prints.
type deviceDecision struct {
	UserCode string           `json:"user_code"`
	Status   string           `json:"status"`
	UserID   string           `json:"user_id,omitempty"`
	Org      *storage.OrgRole `json:"org,omitempty"`
}

func userCodeFlag(fs *flag.FlagSet) *string {
	return fs.String("user-code", "", "the code the device shows, such as BCDF-GHJK (required)")
}

func parseUserCodeFlag(v string) (string, error) {
	if err := required("user-code", v); err != nil {
		return "", err
	}
	code, ok := control.NormalizeUserCode(v)
	if !ok {
		return "", usagef("--user-code %q is not a device code (eight letters, like BCDF-GHJK)", v)
	}
	return code, nil
}

// deviceApprove approves a device login for a user, as the approval page
// does: the key it issues is bound to --org, or to the user's only
// organization.
func deviceApprove(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	userCode := userCodeFlag(fs)
	user := fs.String("user", "", "user id the key is issued to (required)")
	org := fs.String("org", "", "organization the key is bound to (required when the user belongs to several)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		code, err := parseUserCodeFlag(*userCode)
		if err != nil {
			return nil, err
		}
		if err := required("user", *user); err != nil {
			return nil, err
		}
		orgID := strings.TrimSpace(*org)
		if orgID == "" {
			acct, err := db.SignInAccountByID(ctx, *user)
			if errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("user %q does not exist", *user)
			}
			if err != nil {
				return nil, err
			}
			if len(acct.Orgs) != 1 {
				ids := make([]string, len(acct.Orgs))
				for i, o := range acct.Orgs {
					ids[i] = o.ID
				}
				return nil, usagef("--org is required: the user belongs to %d organizations (%s)",
					len(acct.Orgs), strings.Join(ids, ", "))
			}
			orgID = acct.Orgs[0].ID
		}
		got, err := db.ApproveDeviceCode(ctx, code, *user, orgID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return nil, fmt.Errorf("device code %s is unknown, expired or already decided", control.FormatUserCode(code))
		case errors.Is(err, storage.ErrNotMember):
			return nil, fmt.Errorf("user %q is not a member of organization %q", *user, orgID)
		case errors.Is(err, storage.ErrAccountSuspended):
			return nil, fmt.Errorf("user %q is suspended", *user)
		case err != nil:
			return nil, err
		}
		return deviceDecision{UserCode: control.FormatUserCode(code), Status: storage.DeviceApproved,
			UserID: *user, Org: &got}, nil
	}
}

// deviceDeny declines a device login.
func deviceDeny(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	userCode := userCodeFlag(fs)
	return func(ctx context.Context, db *storage.DB) (any, error) {
		code, err := parseUserCodeFlag(*userCode)
		if err != nil {
			return nil, err
		}
		if err := db.DenyDeviceCode(ctx, code, ""); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("device code %s is unknown, expired or already decided", control.FormatUserCode(code))
			}
			return nil, err
		}
		return deviceDecision{UserCode: control.FormatUserCode(code), Status: storage.DeviceDenied}, nil
	}
}
