package storetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// sentinelMaster is the name the test sentinel monitors its primary under.
const sentinelMaster = "gateway"

// The primary and sentinel a test binary shares, stopped with the cluster
// (StopRedisCluster).
var sentinel struct {
	once sync.Once
	url  string
	err  error
}

// RedisSentinelURL returns the URL of a Redis primary behind one sentinel
// (redis-server --sentinel), both started from redis-server on PATH and
// shared by every test of the binary, in the form OpenRedis reads:
// redis://<sentinel>?master_set=gateway. Without redis-server a test
// skips, except under CI=true, where it fails.
func RedisSentinelURL(t testing.TB) string {
	t.Helper()
	bin := needBinary(t, "redis-server", "redis-server")
	sentinel.once.Do(func() { sentinel.url, sentinel.err = startSentinel(bin) })
	require.NoError(t, sentinel.err, "cannot start the test Redis Sentinel")
	return sentinel.url
}

// RedisSentinel returns a client of the test sentinel's primary, closed
// when the test ends.
func RedisSentinel(t testing.TB) rueidis.Client {
	t.Helper()
	return openRedis(t, RedisSentinelURL(t), rueidis.ClientModeSentinel)
}

func startSentinel(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := serversDir()
	if err != nil {
		return "", err
	}
	ports, err := clusterPorts(2)
	if err != nil {
		return "", err
	}
	primary, port := ports[0], ports[1]
	if err := startServer(bin, dir, primary, "--save", "", "--appendonly", "no"); err != nil {
		return "", err
	}
	// A sentinel rewrites its configuration file, so it gets one of its own.
	conf := filepath.Join(dir, "sentinel-"+strconv.Itoa(port)+".conf")
	body := fmt.Sprintf("bind 127.0.0.1\nport %d\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 2000\n",
		port, sentinelMaster, primary, sentinelMaster)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return "", err
	}
	if err := startServer(bin, dir, port, conf, "--sentinel"); err != nil {
		return "", err
	}
	for _, p := range []int{primary, port} {
		c, err := dialNode(ctx, p)
		if err != nil {
			return "", fmt.Errorf("%w (log: %s)", err, nodeLog(dir, p))
		}
		c.Close()
	}
	return fmt.Sprintf("redis://127.0.0.1:%d?master_set=%s", port, sentinelMaster), nil
}
