package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

// clusterNodes is how many primaries the test cluster has: enough that
// tenants land on different nodes and a script on one node cannot see
// another's keys.
const clusterNodes = 3

// The Redis servers a test binary shares (the cluster's nodes, and the
// sentinel and its primary): started on first use, stopped by
// StopRedisCluster (from TestMain) or, should the binary die first, with it
// (see startServer). dir holds their files; cmds are their processes.
var cluster struct {
	once sync.Once
	url  string
	err  error
	dir  string
	mu   sync.Mutex
	cmds []*exec.Cmd
}

// needBinary returns the path of a server program, under the skip-or-fail
// rule of need.
func needBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not on PATH under CI: install the Debian package %s (`make test` does)", name, pkg)
	}
	t.Skipf("%s is not on PATH; install the Debian package %s", name, pkg)
	return ""
}

// RedisClusterURL returns the URL of a three-node Redis Cluster (three
// primaries, no replicas) started from redis-server on PATH, shared by
// every test of the binary, on loopback ports of its own. Without
// redis-server a test skips, except under CI=true, where it fails. Keys
// must carry a prefix of the test's own (see Prefix).
func RedisClusterURL(t testing.TB) string {
	t.Helper()
	bin := needBinary(t, "redis-server", "redis-server")
	cluster.once.Do(func() { cluster.url, cluster.err = startCluster(bin) })
	require.NoError(t, cluster.err, "cannot start the test Redis Cluster")
	return cluster.url
}

// RedisCluster returns a client of the test cluster (RedisClusterURL),
// closed when the test ends.
func RedisCluster(t testing.TB) rueidis.Client {
	t.Helper()
	return openRedis(t, RedisClusterURL(t), rueidis.ClientModeCluster)
}

// openRedis connects to url, requires the client rueidis chose for it to
// be of mode, and closes it when the test ends.
func openRedis(t testing.TB, url string, mode rueidis.ClientMode) rueidis.Client {
	t.Helper()
	c, err := storage.OpenRedis(context.Background(), url)
	require.NoError(t, err)
	require.Equal(t, mode, c.Mode())
	t.Cleanup(c.Close)
	return c
}

// StopRedisCluster stops the test cluster and the test sentinel, if they
// were started, and removes their files. Call it from TestMain after m.Run.
func StopRedisCluster() {
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	for _, cmd := range cluster.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	cluster.cmds = nil
	if cluster.dir != "" {
		os.RemoveAll(cluster.dir)
		cluster.dir = ""
	}
}

// EachRedis runs f on the shared Redis (REDIS_URL) and on the test Redis
// Cluster, as subtests Single and Cluster: the two key layouts the stores
// have (untagged, and hash-tagged for a cluster). connect returns a new
// client of that Redis, closed when its test ends: two clients stand for
// two gateway processes.
func EachRedis(t *testing.T, f func(t *testing.T, connect func(testing.TB) rueidis.Client)) {
	t.Run("Single", func(t *testing.T) { f(t, Redis) })
	t.Run("Cluster", func(t *testing.T) { f(t, RedisCluster) })
}

// EachRedisDeployment is EachRedis and, as subtest Sentinel, the test
// Sentinel's primary (untagged keys, reached through the sentinel): for
// the contract suites.
func EachRedisDeployment(t *testing.T, f func(t *testing.T, connect func(testing.TB) rueidis.Client)) {
	EachRedis(t, f)
	t.Run("Sentinel", func(t *testing.T) { f(t, RedisSentinel) })
}

func startCluster(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := serversDir()
	if err != nil {
		return "", err
	}
	ports, err := clusterPorts(clusterNodes)
	if err != nil {
		return "", err
	}
	nodes := make([]rueidis.Client, len(ports))
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	}()
	for i, port := range ports {
		if err := startNode(bin, dir, port); err != nil {
			return "", err
		}
		if nodes[i], err = dialNode(ctx, port); err != nil {
			return "", fmt.Errorf("%w (log: %s)", err, nodeLog(dir, port))
		}
	}
	// As redis-cli --cluster create does: each primary owns a third of the
	// slots under an epoch of its own, then they meet.
	const slots = 16384
	for i, n := range nodes {
		first, last := i*slots/len(nodes), (i+1)*slots/len(nodes)-1
		for _, cmd := range [][]string{
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)},
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
		} {
			if err := n.Do(ctx, n.B().Arbitrary(cmd...).Build()).Error(); err != nil {
				return "", fmt.Errorf("cannot %s on node %d: %w", strings.Join(cmd, " "), ports[i], err)
			}
		}
	}
	for _, port := range ports[1:] {
		cmd := nodes[0].B().Arbitrary("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(port)).Build()
		if err := nodes[0].Do(ctx, cmd).Error(); err != nil {
			return "", fmt.Errorf("cannot introduce node %d: %w", port, err)
		}
	}
	for i, n := range nodes {
		if err := waitClusterOK(ctx, n, len(nodes)); err != nil {
			return "", fmt.Errorf("node %d: %w (log: %s)", ports[i], err, nodeLog(dir, ports[i]))
		}
	}
	url := "redis://127.0.0.1:" + strconv.Itoa(ports[0])
	for _, port := range ports[1:] {
		url += sep(url) + "addr=127.0.0.1:" + strconv.Itoa(port)
	}
	return url, nil
}

// serversDir is the directory of the test Redis servers' files.
func serversDir() (string, error) {
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	if cluster.dir == "" {
		dir, err := os.MkdirTemp("", "redis-servers-")
		if err != nil {
			return "", err
		}
		cluster.dir = dir
	}
	return cluster.dir, nil
}

func sep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}

// clusterPorts picks n free loopback ports whose cluster bus ports (port +
// 10000) are free too.
func clusterPorts(n int) ([]int, error) {
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100 {
			return nil, errors.New("cannot find free ports for the cluster")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		held = append(held, bus)
		ports = append(ports, port)
	}
	return ports, nil
}

func nodeLog(dir string, port int) string {
	return filepath.Join(dir, strconv.Itoa(port)+".log")
}

// startNode starts one cluster-enabled, persistence-free redis-server.
func startNode(bin, dir string, port int) error {
	p := strconv.Itoa(port)
	return startServer(bin, dir, port,
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
		"--cluster-node-timeout", "5000",
		"--save", "", "--appendonly", "no")
}

// startServer starts redis-server on the loopback port in the foreground,
// logging under dir, as a child that dies with the test binary. args come
// first (a configuration file must).
func startServer(bin, dir string, port int, args ...string) error {
	cmd := exec.Command(bin, append(args,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--logfile", nodeLog(dir, port))...)
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start redis-server: %w", err)
	}
	cluster.mu.Lock()
	cluster.cmds = append(cluster.cmds, cmd)
	cluster.mu.Unlock()
	return nil
}

// dialNode connects to one node by itself, once it answers.
func dialNode(ctx context.Context, port int) (rueidis.Client, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
		if err == nil {
			if err = c.Do(ctx, c.B().Ping().Build()).Error(); err == nil {
				return c, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot reach redis-server on %s: %w", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitClusterOK waits until the node sees every slot served and all nodes.
func waitClusterOK(ctx context.Context, n rueidis.Client, nodes int) error {
	want := []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(nodes)}
	for {
		info, err := n.Do(ctx, n.B().ClusterInfo().Build()).ToString()
		ok := err == nil
		for _, w := range want {
			ok = ok && strings.Contains(info, w)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready: %v %q", err, info)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
