package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// installer installs missing Debian packages, as root only, refreshing the
// package lists at most once per run.
type installer struct {
	updated bool
}

// install installs the Debian package pkg, which provides what. A non-root
// caller gets an error saying what to install.
func (in *installer) install(ctx context.Context, pkg, what string) error {
	if !isRoot() {
		return fmt.Errorf("cannot find %s: install the Debian package %s (sudo apt-get install %s), or run devstack as root to let it install the package", what, pkg, pkg)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("cannot find %s, and apt-get is not available to install it: install %s with this system's package manager", what, what)
	}
	if !in.updated {
		logf("%s is missing: running apt-get update", what)
		if _, err := runOutput(aptGet(ctx, "update")); err != nil {
			return fmt.Errorf("cannot update package lists: %w", err)
		}
		in.updated = true
	}
	logf("installing the Debian package %s", pkg)
	if _, err := runOutput(aptGet(ctx, "install", "-y", "--no-install-recommends", pkg)); err != nil {
		return fmt.Errorf("cannot install %s: %w", pkg, err)
	}
	return nil
}

func aptGet(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-q"}, args...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd
}
