package main

import (
	"context"
	"flag"

	"github.com/edgegw/gateway/storage"
)

// The operator's view of organizations, invitations and the outbox.

func orgMembers(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	org := fs.String("org", "", "organization id (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("org", *org); err != nil {
			return nil, err
		}
		if !storage.ValidUUID(*org) {
			return nil, usagef("--org: %q is not an organization id", *org)
		}
		members, err := db.ListMembers(ctx, *org)
		if err != nil {
			return nil, err
		}
		return map[string]any{"object": "list", "org_id": *org, "data": members}, nil
	}
}

func invitationList(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	org := fs.String("org", "", "organization id (required)")
	limit := fs.Int("limit", 500, "at most this many, newest first")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("org", *org); err != nil {
			return nil, err
		}
		if !storage.ValidUUID(*org) {
			return nil, usagef("--org: %q is not an organization id", *org)
		}
		invs, err := db.ListInvitations(ctx, *org, max(*limit, 1))
		if err != nil {
			return nil, err
		}
		return map[string]any{"object": "list", "org_id": *org, "data": invs}, nil
	}
}

func outboxList(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	org := fs.String("org", "", "only this organization's messages")
	status := fs.String("status", "", "only pending, sent or failed messages")
	limit := fs.Int("limit", 100, "at most this many, newest first")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		switch *status {
		case "", "pending", "sent", "failed":
		default:
			return nil, usagef("--status: %q is not pending, sent or failed", *status)
		}
		if *org != "" && !storage.ValidUUID(*org) {
			return nil, usagef("--org: %q is not an organization id", *org)
		}
		msgs, err := db.ListOutbox(ctx, *org, *status, max(*limit, 1))
		if err != nil {
			return nil, err
		}
		return map[string]any{"object": "list", "data": msgs}, nil
	}
}

func outboxRetry(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	id := fs.String("id", "", "message id (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("id", *id); err != nil {
			return nil, err
		}
		m, err := db.RetryOutbox(ctx, *id)
		if err != nil {
			return nil, adminStorageError(err, "outbox message", *id)
		}
		return m, nil
	}
}
