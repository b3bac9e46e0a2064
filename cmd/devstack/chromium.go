package main

import (
	"context"
	"fmt"
	"os/exec"
)

// chromiumNames are the programs Debian's chromium package and others
// install.
var chromiumNames = []string{"chromium", "chromium-browser"}

func lookChromium() (string, bool) {
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p, true
		}
	}
	return "", false
}

// findChromium returns the path of Chromium, which the approval-page tests
// drive headless. When want is set and it is missing, root installs the
// Debian package chromium; anyone else is told how, and the browser tests
// skip (outside CI) rather than the services failing to start. It returns ""
// when there is no Chromium.
func findChromium(ctx context.Context, in *installer, want bool) (string, error) {
	if p, ok := lookChromium(); ok || !want {
		return p, nil
	}
	if !isRoot() {
		logf("chromium is missing: the browser tests will skip (install the Debian package chromium, or run as root)")
		return "", nil
	}
	if err := in.install(ctx, "chromium", "chromium"); err != nil {
		return "", err
	}
	p, ok := lookChromium()
	if !ok {
		return "", fmt.Errorf("cannot find chromium after installing it")
	}
	return p, nil
}
