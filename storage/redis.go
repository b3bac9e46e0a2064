package storage

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
)

// OpenRedis connects to Redis at a redis:// URL and checks that it answers.
// Redis is optional: a single process keeps its counters in memory.
func OpenRedis(ctx context.Context, url string) (rueidis.Client, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis-url: %w", err)
	}
	opt.DisableCache = true // client-side caching needs server support the gateway does not rely on
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
