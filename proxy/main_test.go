package proxy

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Started by a test as a child process of its own (heldconn_test.go).
	if os.Getenv(heldChildEnv) != "" {
		os.Exit(heldChild())
	}
	os.Exit(m.Run())
}
