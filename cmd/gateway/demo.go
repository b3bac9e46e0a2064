package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

const (
	demoOrgName = "Demo Organization"
	demoEmail   = "demo@example.com"
)

// seedDemo makes sure the demo organization and user exist, issues a fresh
// developer key for them and prints it with a line to try. Keys issued on
// earlier runs keep working.
func (a *app) seedDemo(ctx context.Context, w io.Writer) error {
	org, err := a.db.FirstOrgByName(ctx, demoOrgName)
	if errors.Is(err, storage.ErrNotFound) {
		org, err = a.db.CreateOrg(ctx, demoOrgName)
	}
	if err != nil {
		return err
	}
	user, err := a.db.UserByEmail(ctx, demoEmail)
	if errors.Is(err, storage.ErrNotFound) {
		user, err = a.db.CreateUser(ctx, demoEmail, org.ID, hotpath.RoleOwner)
	}
	if err != nil {
		return err
	}
	key, err := a.db.CreateKey(ctx, storage.NewKey{UserID: user.ID, OrgID: org.ID, Kind: hotpath.KindDeveloper})
	if errors.Is(err, storage.ErrNotMember) {
		return fmt.Errorf("demo user %s is not a member of %q", demoEmail, demoOrgName)
	}
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(a.Addr())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	base := "http://" + net.JoinHostPort(host, port)
	fmt.Fprintf(w, `
Gateway is up at %s (organization %q, user %s).
Demo developer key, shown once: %s

Try:
  curl -s %s/api/v1/me -H 'Authorization: Bearer %s'
  curl -s %s/api/v1/models -H 'Authorization: Bearer %s'

`, base, org.Name, user.Email, key.AccessToken, base, key.AccessToken, base, key.AccessToken)
	return nil
}
