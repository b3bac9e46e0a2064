package storage_test

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/edgegw/gateway/storage"
	"github.com/edgegw/gateway/storage/storetest"
)

// Shape of the seeded data: every author has convBenchPerUser
// conversations of convBenchPerConv messages, alternating user and
// assistant turns, in one organization.
const (
	convBenchPerUser = 20
	convBenchPerConv = 50
)

// BenchmarkConversationsAtScale seeds a database with
// GW_CONVERSATION_BENCH_MESSAGES stored messages (1000000 for the figures
// in docs/conversations.md) and measures the latency of appends and of
// searches over it, reporting percentiles:
//
//	GW_CONVERSATION_BENCH_MESSAGES=1000000 go test -run '^$' \
//	    -bench BenchmarkConversationsAtScale -benchtime 2000x -timeout 60m ./storage/
//
// Without the variable it does nothing: seeding takes minutes.
func BenchmarkConversationsAtScale(b *testing.B) {
	size, _ := strconv.Atoi(os.Getenv("GW_CONVERSATION_BENCH_MESSAGES"))
	if size <= 0 {
		b.Skip("set GW_CONVERSATION_BENCH_MESSAGES (such as 1000000) to seed that many messages and run")
	}
	ctx := context.Background()
	db := storetest.DB(b)
	start := time.Now()
	w := convBenchSeed(b, db, size)
	b.Logf("seeded %d messages in %d conversations of %d authors in %s", w.messages, len(w.convs), len(w.users),
		time.Since(start).Round(time.Second))

	b.Run("append", func(b *testing.B) {
		rng := mrand.New(mrand.NewPCG(1, 2))
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := w.convs[rng.IntN(len(w.convs))]
			n := storage.NewMessage{Role: "user", Status: "complete", Content: w.sentence(rng, 12, 40)}
			if i%2 == 1 {
				n.Role = "assistant"
			}
			t0 := time.Now()
			_, _, err := db.AppendMessage(ctx, c.user, w.org, c.id, n, nil,
				func(r *storage.AppendResult) ([]byte, error) { return []byte(r.Message.ID), nil })
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		convBenchReport(b, lat)
	})

	b.Run("search", func(b *testing.B) {
		rng := mrand.New(mrand.NewPCG(3, 4))
		lat := make([]time.Duration, 0, b.N)
		hits := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			user := w.users[rng.IntN(len(w.users))]
			q := w.query(rng, i)
			t0 := time.Now()
			res, err := db.SearchMessages(ctx, user, w.org, q, "chat", 20)
			lat = append(lat, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			hits += len(res)
		}
		b.StopTimer()
		convBenchReport(b, lat)
		b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
	})

	// The plan of a search for a common word, for the record.
	rows, err := db.Pool.Query(ctx, `explain (analyze, buffers) select m.id from conversation_messages m
		join conversations c on c.id = m.conversation_id
		where m.user_id = $1 and m.search @@ websearch_to_tsquery('english', $2) and c.user_id = $1 and c.org_id = $3
		order by ts_rank_cd(m.search, websearch_to_tsquery('english', $2)) desc limit 20`, w.users[0], w.vocab[0], w.org)
	require.NoError(b, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(b, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(b, rows.Err())
	b.Logf("plan of a search for the most common word:\n%s", strings.Join(plan, "\n"))
}

func convBenchReport(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(float64(len(lat)-1) * p)
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

type convBenchConv struct{ id, user string }

type convBenchWorld struct {
	org      string
	users    []string
	convs    []convBenchConv
	messages int
	// vocab is ordered by frequency: vocab[0] is the most common word.
	vocab []string
	zipf  *mrand.Zipf
}

// sentence is between min and max words drawn from the Zipf-distributed
// vocabulary, like natural text: a few words everywhere, most words rare.
func (w *convBenchWorld) sentence(rng *mrand.Rand, min, max int) string {
	n := min + rng.IntN(max-min+1)
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(w.vocab[w.zipf.Uint64()])
	}
	return sb.String()
}

// query mixes the kinds of search people type: a common word, a mid-
// frequency word, a rare word, two words, a phrase, an alternative and an
// exclusion.
func (w *convBenchWorld) query(rng *mrand.Rand, i int) string {
	word := func(lo, hi int) string { return w.vocab[lo+rng.IntN(hi-lo)] }
	switch i % 7 {
	case 0:
		return word(0, 10)
	case 1:
		return word(100, 1000)
	case 2:
		return word(3000, 20000)
	case 3:
		return word(50, 500) + " " + word(50, 500)
	case 4:
		return `"` + word(0, 50) + " " + word(0, 50) + `"`
	case 5:
		return word(200, 2000) + " or " + word(200, 2000)
	default:
		return word(20, 200) + " -" + word(0, 20)
	}
}

// convBenchVocabulary makes n distinct pronounceable words of two to four
// syllables, so that the English stemmer keeps them apart.
func convBenchVocabulary(n int) []string {
	cons := []string{"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "t", "v", "z", "br", "tr", "st"}
	vows := []string{"a", "e", "i", "o", "u", "ai", "ou"}
	rng := mrand.New(mrand.NewPCG(7, 8))
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		var sb strings.Builder
		for range 2 + rng.IntN(3) {
			sb.WriteString(cons[rng.IntN(len(cons))])
			sb.WriteString(vows[rng.IntN(len(vows))])
		}
		sb.WriteString(cons[rng.IntN(len(cons))])
		if s := sb.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func convBenchUUID() [16]byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func convBenchUUIDString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// convBenchSeed writes the organization, authors and conversations with SQL
// and the messages with COPY, with the search index built after the load
// (one bulk build instead of a million inserts into it).
func convBenchSeed(b *testing.B, db *storage.DB, size int) *convBenchWorld {
	ctx := context.Background()
	w := &convBenchWorld{vocab: convBenchVocabulary(20000)}
	rng := mrand.New(mrand.NewPCG(5, 6))
	w.zipf = mrand.NewZipf(rng, 1.07, 2, uint64(len(w.vocab)-1))
	convs := max(1, size/convBenchPerConv)
	users := max(1, convs/convBenchPerUser)

	require.NoError(b, db.Pool.QueryRow(ctx, `insert into organizations (name) values ('Bench') returning id`).Scan(&w.org))
	rows, err := db.Pool.Query(ctx, `with u as (
			insert into users (email, personal_org_id)
			select 'bench' || g || '@example.com', $1 from generate_series(1, $2) g returning id)
		insert into memberships (org_id, user_id, role) select $1, id, 'member' from u returning user_id::text`,
		w.org, users)
	require.NoError(b, err)
	for rows.Next() {
		var id string
		require.NoError(b, rows.Scan(&id))
		w.users = append(w.users, id)
	}
	require.NoError(b, rows.Err())

	_, err = db.Pool.Exec(ctx, `drop index conversation_messages_search_idx`)
	require.NoError(b, err)
	now := time.Now()
	convRows := make([][]any, 0, convs)
	var msgRows [][]any
	flush := func() {
		_, err := db.Pool.CopyFrom(ctx, pgx.Identifier{"conversation_messages"},
			[]string{"id", "conversation_id", "user_id", "parent_id", "sequence", "role", "content", "created_at"},
			pgx.CopyFromRows(msgRows))
		require.NoError(b, err)
		msgRows = msgRows[:0]
	}
	for i := range convs {
		user := w.users[i%len(w.users)]
		cid := convBenchUUID()
		at := now.Add(-time.Duration(convs-i) * time.Minute)
		convRows = append(convRows, []any{cid, w.org, user, "chat", convBenchPerConv, at, at,
			at.Add(storage.ConversationRetention)})
		w.convs = append(w.convs, convBenchConv{id: convBenchUUIDString(cid), user: user})
	}
	_, err = db.Pool.CopyFrom(ctx, pgx.Identifier{"conversations"},
		[]string{"id", "org_id", "user_id", "source", "message_count", "created_at", "updated_at", "retention_until"},
		pgx.CopyFromRows(convRows))
	require.NoError(b, err)
	for i, c := range convRows {
		var parent any
		for seq := 1; seq <= convBenchPerConv; seq++ {
			id := convBenchUUID()
			role, text := "user", w.sentence(rng, 5, 30)
			if seq%2 == 0 {
				role, text = "assistant", w.sentence(rng, 30, 120)
			}
			msgRows = append(msgRows, []any{id, c[0], w.convs[i].user, parent, seq, role, text,
				c[5].(time.Time).Add(time.Duration(seq) * time.Second)})
			parent = id
			w.messages++
		}
		if len(msgRows) >= 50_000 {
			flush()
		}
	}
	if len(msgRows) > 0 {
		flush()
	}
	_, err = db.Pool.Exec(ctx, `set maintenance_work_mem = '512MB'`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `create index conversation_messages_search_idx on conversation_messages using gin (user_id, search)`)
	require.NoError(b, err)
	_, err = db.Pool.Exec(ctx, `vacuum analyze conversations, conversation_messages`)
	require.NoError(b, err)
	return w
}
