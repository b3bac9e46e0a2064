package storage_test

import (
	"os"
	"testing"

	"github.com/edgegw/gateway/storage/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopRedisCluster()
	os.Exit(code)
}
