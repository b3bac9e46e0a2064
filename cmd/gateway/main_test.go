package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegw/gateway/storage/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopRedisCluster()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}
