package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/storage"
)

// adminStorageError turns storage's sentinels into messages that name what
// the operator typed.
func adminStorageError(err error, what, id string) error {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Errorf("%s %q does not exist", what, id)
	case errors.Is(err, storage.ErrInvalid), errors.Is(err, storage.ErrConflict):
		return usagef("%v", err)
	}
	return err
}

func orgSetPlan(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	org := fs.String("org", "", "organization id (required)")
	plan := fs.String("plan", "", "plan name from the configuration file (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("org", *org); err != nil {
			return nil, err
		}
		if err := required("plan", *plan); err != nil {
			return nil, err
		}
		if err := db.SetOrgPlan(ctx, *org, strings.TrimSpace(*plan)); err != nil {
			return nil, adminStorageError(err, "organization", *org)
		}
		return map[string]any{"id": *org, "plan": strings.TrimSpace(*plan)}, nil
	}
}

func workspaceCreate(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	org := fs.String("org", "", "organization id (required)")
	name := fs.String("name", "", "workspace name, 1 to 128 bytes (required)")
	slug := fs.String("slug", "", "URL-safe handle; derived from the name when omitted")
	spendCap := fs.String("spend-cap-usd", "", "monthly spend cap in USD")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("org", *org); err != nil {
			return nil, err
		}
		if err := required("name", *name); err != nil {
			return nil, err
		}
		capMicros, err := optUSD("spend-cap-usd", *spendCap)
		if err != nil {
			return nil, err
		}
		w, err := db.CreateWorkspace(ctx, *org, *name, *slug, capMicros)
		if err != nil {
			return nil, adminStorageError(err, "organization", *org)
		}
		return w, nil
	}
}

func workspaceSetCap(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	ws := fs.String("workspace", "", "workspace id (required)")
	spendCap := fs.String("spend-cap-usd", "", "monthly spend cap in USD")
	clearCap := fs.Bool("clear", false, "remove the cap")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("workspace", *ws); err != nil {
			return nil, err
		}
		if (*spendCap == "") == !*clearCap {
			return nil, usagef("give exactly one of --spend-cap-usd and --clear")
		}
		capMicros, err := optUSD("spend-cap-usd", *spendCap)
		if err != nil {
			return nil, err
		}
		if err := db.SetWorkspaceCap(ctx, *ws, capMicros); err != nil {
			return nil, adminStorageError(err, "workspace", *ws)
		}
		return map[string]any{"id": *ws, "spend_cap_micros": capMicros}, nil
	}
}

func keyAdjustCredits(fs *flag.FlagSet) func(context.Context, *storage.DB) (any, error) {
	id := fs.String("key-id", "", "headless key id (required)")
	usd := fs.String("usd", "", "amount in USD to add; a leading minus takes credit away (required)")
	return func(ctx context.Context, db *storage.DB) (any, error) {
		if err := required("key-id", *id); err != nil {
			return nil, err
		}
		if err := required("usd", *usd); err != nil {
			return nil, err
		}
		v, neg := strings.CutPrefix(strings.TrimSpace(*usd), "-")
		micros, err := hotpath.ParseMicroUSD(v)
		if err != nil {
			return nil, usagef("--usd: %v", err)
		}
		if neg {
			micros = -micros
		}
		adj, err := db.AdjustCredits(ctx, *id, micros)
		if err != nil {
			return nil, adminStorageError(err, "headless key", *id)
		}
		return map[string]any{"id": *id, "credits_adjustment_micros": adj}, nil
	}
}
