package storage_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
)

func TestParseRedisURL(t *testing.T) {
	t.Run("Single", func(t *testing.T) {
		opt, err := storage.ParseRedisURL("redis://:secret@10.0.0.1:6379/0")
		require.NoError(t, err)
		require.Equal(t, []string{"10.0.0.1:6379"}, opt.InitAddress)
		require.Equal(t, "secret", opt.Password)
		require.True(t, opt.DisableCache)
		require.Empty(t, opt.Sentinel.MasterSet)
	})
	t.Run("ClusterSeeds", func(t *testing.T) {
		opt, err := storage.ParseRedisURL("redis://n1:6379?addr=n2:6379&addr=n3:6380")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"n1:6379", "n2:6379", "n3:6380"}, opt.InitAddress)
		require.True(t, opt.ShuffleInit, "a fleet does not all start on the first seed")
	})
	t.Run("Sentinel", func(t *testing.T) {
		opt, err := storage.ParseRedisURL("redis://s1:26379?addr=s2:26379&master_set=gateway")
		require.NoError(t, err)
		require.Equal(t, "gateway", opt.Sentinel.MasterSet)
		require.Positive(t, opt.Sentinel.TopologyRefreshInterval, "a missed failover announcement is caught up")
		require.ElementsMatch(t, []string{"s1:26379", "s2:26379"}, opt.InitAddress)
	})
	t.Run("Invalid", func(t *testing.T) {
		_, err := storage.ParseRedisURL("http://x")
		require.ErrorContains(t, err, "redis-url")
	})
	// An error names the setting and shows the URL, its password masked,
	// however the password broke the URL.
	t.Run("InvalidRedacted", func(t *testing.T) {
		for _, c := range []struct{ url, shown string }{
			{"redis://:SECRETPW@bad host/0", "`redis://:xxxxx@bad host/0`: invalid character"},
			{"redis://gw:SECRETPW@h:port/0", "`redis://gw:xxxxx@h:port/0`: invalid port"},
			{"redis://:SECRET/PW@h:6379/0", "`redis://:xxxxx@h:6379/0`: the password is not valid"},
			{"redis://:SE:CR@ET/PW@h/db", "`redis://:xxxxx@h/db`: redis: invalid database number"},
			{"http://:SECRETPW@h", "`http://:xxxxx@h`"},
		} {
			_, err := storage.ParseRedisURL(c.url)
			require.ErrorContains(t, err, "redis-url: cannot parse "+c.shown, c.url)
			for _, part := range []string{"SECRET", "PW", "CR", "ET"} {
				require.NotContains(t, err.Error(), part, c.url)
			}
		}
	})
}
