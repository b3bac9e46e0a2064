package storage_test

import (
	"os"
	"testing"

	"github.com/edgegw/gateway/storage/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	storetest.StopRedisCluster()
	storetest.StopPgBouncer()
	os.Exit(code)
}
