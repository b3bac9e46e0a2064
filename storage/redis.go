package storage

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/rueidis"

	"github.com/edgegw/gateway/hotpath"
)

// sentinelRefresh is how often a Sentinel client checks which server is the
// primary, besides following the sentinels' announcements: a missed
// announcement would otherwise leave it on a demoted primary.
const sentinelRefresh = 5 * time.Second

// RedisCallTimeout bounds every round trip the gateway makes to Redis while
// it serves: a request's counters and replay record, and the background
// renewals of leases and claims alike. Past it a call fails, and a request
// runs unmetered or without replay. The calls share one client: when its
// connection has died, the call that finds it so dials again and every
// other call waits for that dial, so one call with a longer deadline would
// hold them all that long on a Redis that accepts connections and answers
// nothing.
const RedisCallTimeout = 250 * time.Millisecond

// OpenRedis connects to Redis and checks that it answers. Redis is
// optional: a single process keeps its counters in memory.
//
// raw is a redis:// (or rediss://) URL in the form rueidis.ParseURL reads:
//
//   - redis://host:6379/0: one server. When that server is a Redis Cluster
//     node, the client finds the cluster from it.
//   - redis://node1:6379?addr=node2:6379&addr=node3:6379: a Redis Cluster
//     through several seed nodes (tried in random order, so a fleet does
//     not all start on the first).
//   - redis://sentinel1:26379?addr=sentinel2:26379&master_set=gateway:
//     the primary the sentinels name for master_set, followed across
//     failovers. The URL's user and password are the data servers'; the
//     sentinels are asked without credentials.
//
// The client's mode (single, cluster, sentinel) is what RedisCounters reads
// to decide whether its keys carry hash tags.
func OpenRedis(ctx context.Context, raw string) (rueidis.Client, error) {
	opt, err := ParseRedisURL(raw)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to redis: %w", err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot ping redis: %w", err)
	}
	return c, nil
}

// ParseRedisURL reads a Redis URL (see OpenRedis) into the client options
// the gateway uses. Its errors never quote the URL's password.
func ParseRedisURL(raw string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(raw)
	if err != nil {
		// The parser's message quotes the URL, or pieces of a password it
		// misread as host, port or path. The same URL with its password
		// masked fails the same way when the fault is elsewhere, and its
		// message can quote only the mask.
		redacted := hotpath.RedactURL(raw)
		_, err = rueidis.ParseURL(redacted)
		var ue *url.Error
		switch {
		case err == nil:
			err = errors.New("the password is not valid in a URL (percent-encode its reserved characters)")
		case errors.As(err, &ue):
			err = ue.Err // without the URL, quoted below
		}
		return opt, fmt.Errorf("redis-url: cannot parse `%s`: %w", redacted, err)
	}
	opt.DisableCache = true // client-side caching needs server support the gateway does not rely on
	opt.ShuffleInit = len(opt.InitAddress) > 1
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.TopologyRefreshInterval = sentinelRefresh
	}
	return opt, nil
}
