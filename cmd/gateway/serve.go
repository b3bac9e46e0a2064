package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegw/gateway/bench/sim"
	"github.com/edgegw/gateway/control"
	"github.com/edgegw/gateway/control/outbox"
	"github.com/edgegw/gateway/hotpath"
	"github.com/edgegw/gateway/hotpath/meter"
	"github.com/edgegw/gateway/proxy"
	"github.com/edgegw/gateway/storage"
)

// serveConfig is every setting of `gateway serve`.
type serveConfig struct {
	Addr            string
	AdminAddr       string
	ConfigPath      string
	DB              storage.Config
	RedisURL        string
	Migrate         bool
	Demo            bool
	LogLevel        string
	LogFormat       string
	AccessLog       bool
	Keys            hotpath.VerifierConfig
	MaxBodySize     int
	MaxHeaderBytes  int
	MaxURIBytes     int
	ReadTimeout     time.Duration
	IdleTimeout     time.Duration
	StreamKeepAlive time.Duration
	DrainDelay      time.Duration
	ShutdownTimeout time.Duration
	// StatusProbes runs the status prober here (one process of the fleet
	// probes at a time, under an advisory lock).
	StatusProbes bool
	// StatusReadEvery is how long one read of the measurements serves
	// GET /api/status.
	StatusReadEvery time.Duration
	SimTTFT         time.Duration
	SimITL          time.Duration
	IdempotencyTTL  time.Duration
	// RetentionInterval is how often this process runs the conversation
	// retention job; zero disables it here.
	RetentionInterval time.Duration
	// MemoryReturn is how often this process checks whether it has gone
	// quiet and holds freed heap worth returning; zero disables it.
	MemoryReturn time.Duration
	// Ledger configures the request log's writer and spool.
	Ledger storage.LedgerConfig
	// Eval configures this process's share of the eval queue.
	Eval evalFlags
	// Tracing configures span export over OTLP (off unless configured);
	// validate resolves it and sets tracingOn.
	Tracing   tracingConfig
	tracingOn bool

	// UpstreamMaxResponse and UpstreamMaxEvent cap what an upstream sends
	// back: a non-streaming body and one SSE event, bytes.
	UpstreamMaxResponse, UpstreamMaxEvent int

	dbConns *int
	// now is the clock of file uploads, reads, expiry and the janitor;
	// nil is time.Now. Tests inject one.
	now func() time.Time
}

func (c *serveConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "address the API listens on")
	fs.StringVar(&c.AdminAddr, "admin-addr", "127.0.0.1:9090", "address of the admin listener serving /metrics and /debug/pprof/; empty disables it")
	fs.StringVar(&c.ConfigPath, "config", "", "YAML file with tiers and prices (see the configuration reference)")
	fs.StringVar(&c.DB.URL, "database-url", "", "PostgreSQL URL (required)")
	fs.StringVar(&c.DB.DirectURL, "database-direct-url", "", "PostgreSQL URL that bypasses a transaction-mode pooler (PgBouncer), for the key listener, the status lock and migrations; setting it runs --database-url's queries without named prepared statements; empty: --database-url is direct")
	dbConns := fs.Int("database-max-conns", 16, "PostgreSQL pool size")
	fs.StringVar(&c.DB.ReadURL, "database-read-url", "", "optional streaming replica of the database for the reads that tolerate staleness (status document, request-log lookups)")
	fs.DurationVar(&c.DB.ReadMaxLag, "database-read-max-lag", time.Second, "staleness above which the read replica is not read")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL for fleet-wide counters: redis://host:port, a cluster's seed nodes as redis://node1:port?addr=node2:port, or Sentinel as redis://sentinel1:port?addr=sentinel2:port&master_set=name; empty keeps counters in this process")
	fs.BoolVar(&c.Migrate, "migrate", true, "apply pending schema migrations at start (under an advisory lock)")
	fs.BoolVar(&c.Demo, "demo", false, "seed a demo organization, user and developer key, and print the key")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "json or text")
	fs.BoolVar(&c.AccessLog, "access-log", false, "log one line per request (request_id, trace_id, method, route, status, duration, key_id)")
	fs.Int64Var(&c.Keys.MaxKeys, "key-cache-size", 100_000, "key records held in the cache")
	fs.DurationVar(&c.Keys.TTL, "key-cache-ttl", 5*time.Minute, "longest a cached key record is trusted without a refetch")
	fs.IntVar(&c.MaxBodySize, "max-body-size", 8<<20, "largest request body accepted, bytes")
	fs.IntVar(&c.UpstreamMaxResponse, "upstream-max-response-bytes", proxy.DefaultMaxResponseBytes, "largest non-streaming upstream response body accepted, bytes")
	fs.IntVar(&c.UpstreamMaxEvent, "upstream-max-event-bytes", proxy.DefaultMaxEventBytes, "largest single upstream SSE event accepted, bytes")
	fs.Int64Var(&c.Keys.NegativeKeys, "key-negative-cache-size", 10_000, "unknown key hashes remembered, so a repeated forged key costs no database lookup")
	fs.DurationVar(&c.Keys.NegativeTTL, "key-negative-cache-ttl", 30*time.Second, "how long an unknown key hash is remembered")
	fs.IntVar(&c.MaxHeaderBytes, "max-header-bytes", 16<<10, "largest request header block accepted (the fields after the request line), bytes; larger is 431")
	fs.IntVar(&c.MaxURIBytes, "max-uri-bytes", 8<<10, "longest request target accepted, bytes; longer is 414")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", 30*time.Second, "time allowed to read a request, from its first byte to its last (and a new connection's first byte); past it the request is 408")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 120*time.Second, "how long a kept connection may wait for its next request before it is closed without a word")
	fs.DurationVar(&c.StreamKeepAlive, "stream-keepalive-interval", 15*time.Second, "how long a stream may send its client nothing (a tier reasoning on a wire that hides reasoning, a silent upstream) before it sends an SSE comment line \": keep-alive\"; 0 sends none")
	fs.DurationVar(&c.DrainDelay, "drain-delay", 0, "on shutdown (SIGTERM), the grace during which /api/ready answers 503 while requests are still served, each answer closing its connection, before the listener closes; set it above the load balancer's readiness check interval")
	fs.BoolVar(&c.StatusProbes, "status-probes", true, "take part in probing the components of /api/status (one process of the fleet probes at a time, under a PostgreSQL advisory lock; every process reports its breakers); false only serves the document")
	fs.DurationVar(&c.StatusReadEvery, "status-read-interval", time.Second, "how long one read of the stored measurements serves GET /api/status, so a public route polled hard costs PostgreSQL at most one read per interval and process; verdicts and ages are still computed per request; 0 reads on every request")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long shutdown waits for requests and streams in flight before it cuts their upstream calls")
	fs.DurationVar(&c.SimTTFT, "sim-ttft", 0, "time to first token of the in-process simulator (tiers on provider sim)")
	fs.DurationVar(&c.SimITL, "sim-itl", 0, "time between tokens of the in-process simulator")
	fs.DurationVar(&c.IdempotencyTTL, "idempotency-ttl", 24*time.Hour, "how long an Idempotency-Key replay is kept")
	fs.DurationVar(&c.RetentionInterval, "retention-interval", 10*time.Minute, "how often this process deletes conversations past their retention deadline (one process at a time, under an advisory lock); 0 disables it here")
	fs.DurationVar(&c.MemoryReturn, "memory-return-interval", 30*time.Second, "how often this process checks whether it has gone quiet (almost nothing allocated since the last check) while holding freed heap, and then returns that memory to the system at once; 0 leaves it to the Go runtime's own pace")
	fs.StringVar(&c.Ledger.SpoolDir, "ledger-spool-dir", ".data/spool", "directory where request-log rows wait while PostgreSQL is unreachable, and of the crash journal")
	fs.Int64Var(&c.Ledger.SpoolMaxBytes, "ledger-spool-max-bytes", 1<<30, "bound of this process's ledger spool, bytes")
	fs.IntVar(&c.Ledger.QueueSize, "ledger-queue-size", 16384, "request-log rows held in memory for the writer")
	fs.IntVar(&c.Ledger.BatchSize, "ledger-batch-size", 500, "request-log rows per insert statement")
	fs.DurationVar(&c.Ledger.FlushInterval, "ledger-flush-interval", 200*time.Millisecond, "longest a request-log row waits for its batch")
	fs.DurationVar(&c.Ledger.WriteTimeout, "ledger-write-timeout", 5*time.Second, "bound of one request-log batch statement")
	fs.IntVar(&c.Eval.Workers, "eval-workers", 8, "eval items this process runs at once (docs/evals.md); 0 leaves runs to other processes")
	fs.IntVar(&c.Eval.Fleet, "eval-fleet-concurrency", 32, "eval items running at once across every process sharing the database, so evals never starve live traffic")
	fs.DurationVar(&c.Eval.Lease, "eval-lease", 30*time.Second, "how long an eval item's claim lives without a heartbeat; a killed process's items are retried by another after it")
	fs.DurationVar(&c.Eval.Poll, "eval-poll", 500*time.Millisecond, "how often an idle eval runner looks for queued work")
	c.Tracing.flags(fs)
	c.dbConns = dbConns
}

// maxDBConns bounds --database-max-conns: PostgreSQL accepts no more
// connections than this (max_connections' own ceiling).
const maxDBConns = 1<<18 - 1

// validate checks every setting and names the first one that is wrong.
func (c *serveConfig) validate() error {
	if c.dbConns != nil {
		// Checked before the conversion, which would wrap a large value
		// into a small or negative pool.
		if n := *c.dbConns; n < 1 || n > maxDBConns {
			return fmt.Errorf("database-max-conns: %d is out of range: from 1 to %d (PostgreSQL's highest max_connections)", n, maxDBConns)
		}
		c.DB.MaxConns = int32(*c.dbConns)
	}
	var err error
	if c.tracingOn, err = c.Tracing.resolve(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr: %w", err)
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return fmt.Errorf("admin-addr: %w", err)
		}
	}
	if err := c.DB.Validate(); err != nil {
		return err
	}
	if c.RedisURL != "" {
		if _, err := storage.ParseRedisURL(c.RedisURL); err != nil {
			return err
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("log-format: %q is not json or text", c.LogFormat)
	}
	if err := c.Keys.Validate(); err != nil {
		return fmt.Errorf("key-cache: %w", err)
	}
	if c.MaxBodySize < 1024 {
		return errors.New("max-body-size: must be at least 1024")
	}
	if c.MaxHeaderBytes != 0 && c.MaxHeaderBytes < 1024 {
		return errors.New("max-header-bytes: must be at least 1024")
	}
	if c.MaxURIBytes != 0 && c.MaxURIBytes < 256 {
		return errors.New("max-uri-bytes: must be at least 256")
	}
	if c.UpstreamMaxResponse == 0 {
		c.UpstreamMaxResponse = proxy.DefaultMaxResponseBytes
	}
	if c.UpstreamMaxEvent == 0 {
		c.UpstreamMaxEvent = proxy.DefaultMaxEventBytes
	}
	if c.UpstreamMaxResponse < 4096 || c.UpstreamMaxEvent < 4096 {
		return errors.New("upstream-max-response-bytes and upstream-max-event-bytes: must be at least 4096")
	}
	for name, d := range map[string]time.Duration{"read-timeout": c.ReadTimeout, "idle-timeout": c.IdleTimeout,
		"shutdown-timeout": c.ShutdownTimeout} {
		if d <= 0 {
			return fmt.Errorf("%s: must be positive", name)
		}
	}
	if c.StreamKeepAlive < 0 {
		return errors.New("stream-keepalive-interval: must not be negative")
	}
	if c.StatusReadEvery < 0 {
		return errors.New("status-read-interval: must not be negative")
	}
	if c.DrainDelay < 0 {
		return errors.New("drain-delay: must not be negative")
	}
	if c.SimTTFT < 0 || c.SimITL < 0 {
		return errors.New("sim-ttft, sim-itl: must not be negative")
	}
	if c.IdempotencyTTL <= 0 {
		return errors.New("idempotency-ttl: must be positive")
	}
	if c.RetentionInterval < 0 {
		return errors.New("retention-interval: must not be negative")
	}
	if c.MemoryReturn < 0 {
		return errors.New("memory-return-interval: must not be negative")
	}
	if err := c.Eval.validate(); err != nil {
		return err
	}
	if err := c.Ledger.Validate(); err != nil {
		return err
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level: %q is not debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	l, _ := parseLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func runServe(args []string, stdout, stderr io.Writer) int {
	var cfg serveConfig
	fs := flag.NewFlagSet("gateway serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.flags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: gateway serve [flags]\n\nEvery flag can also be set with the environment variable shown beside it.\n\n")
		fs.PrintDefaults()
	}
	if exit, run := parseCommand(fs, args, stderr); !run {
		return exit
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "gateway serve: invalid configuration: %v\n", err)
		return 2
	}
	log := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := startApp(ctx, cfg, log)
	var (
		bind *bindError
		conf *configError
	)
	switch {
	case errors.As(err, &conf):
		fmt.Fprintf(stderr, "gateway serve: invalid configuration: %v\n", err)
		return 2
	case errors.As(err, &bind):
		fmt.Fprintf(stderr, "gateway serve: %v\n", err)
		return 2
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	if cfg.Demo {
		if err := a.seedDemo(ctx, stdout); err != nil {
			log.Error("cannot seed demo data", "err", err)
			a.shutdown()
			return 1
		}
	}
	<-ctx.Done()
	log.Info("shutting down")
	a.shutdown()
	return 0
}

// app is one running gateway: what `serve` starts and tests drive.
type app struct {
	cfg      serveConfig
	log      *slog.Logger
	db       *storage.DB
	redis    rueidis.Client
	verifier *hotpath.Verifier
	api      *control.API
	server   *proxy.Server
	ln       net.Listener
	accept   *proxy.AcceptRetrier // ln, as the server accepts from it
	admin    *http.Server
	adminLn  net.Listener
	sim      *sim.Server
	chat     *proxy.Chat
	ledger   *storage.Ledger
	counters *storage.RedisCounters
	limits   *meter.Limits
	files    *storage.Files
	janitor  *control.FileJanitor
	// evalStop stops the eval runner; evalDone closes when it has.
	evalStop context.CancelFunc
	evalDone chan struct{}
	metrics  *metrics.Set
	edge     *proxy.Edge
	// tracing exports spans; nil when tracing is off.
	tracing *sdktrace.TracerProvider
	status  *control.Status
	// stopStatus ends the status prober; statusDone is closed when it has
	// given its lead up.
	stopStatus context.CancelFunc
	statusDone chan struct{}
	stopOnce   sync.Once
	cancel     context.CancelFunc
	done       chan struct{}
	// warming counts the JSON codecs still compiling; the API listener
	// serves once they are done (warm).
	warming sync.WaitGroup
}

// warm compiles JSON codecs in the background, beside the rest of the
// start, so that the first requests find them compiled. A failure costs
// only speed: sonic then compiles each on its first use.
func (a *app) warm(what string, pretouch func() error) {
	a.warming.Go(func() {
		if err := pretouch(); err != nil {
			a.log.Warn("cannot compile JSON codecs ahead; their first requests will", "codecs", what, "err", err)
		}
	})
}

// keepAliveInterval maps the flag (0 sends none) to the chat setting (0 is
// the default, negative none).
func keepAliveInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// bindError is a listener address that cannot be bound: `serve` exits 2,
// naming it, before it has served anything.
type bindError struct {
	flag, addr string
	err        error
}

func (e *bindError) Error() string {
	return fmt.Sprintf("cannot listen on %s %s: %v", e.flag, e.addr, e.err)
}

func (e *bindError) Unwrap() error { return e.err }

// configError is a setting of the --config file (or what it names, such
// as a provider's key variable) that cannot be used: `serve` exits 2
// naming it, as it does for a flag, before it has served anything.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }

func (e *configError) Unwrap() error { return e.err }

// listen binds every listener before anything is served: a gateway that
// cannot bind one of its addresses serves on none of them.
func (a *app) listen() error {
	var err error
	if a.ln, err = net.Listen("tcp", a.cfg.Addr); err != nil {
		return &bindError{flag: "--addr", addr: a.cfg.Addr, err: err}
	}
	if a.cfg.AdminAddr != "" {
		if a.adminLn, err = net.Listen("tcp", a.cfg.AdminAddr); err != nil {
			_ = a.ln.Close()
			a.ln = nil
			return &bindError{flag: "--admin-addr", addr: a.cfg.AdminAddr, err: err}
		}
	}
	return nil
}

// startApp binds its listeners, wires storage, hotpath, proxy and control
// together and starts serving. It returns once the API listener accepts
// connections.
func startApp(ctx context.Context, cfg serveConfig, log *slog.Logger) (*app, error) {
	st, err := loadSettings(cfg.ConfigPath)
	if err != nil {
		return nil, &configError{err}
	}
	tiers := st.Tiers
	a := &app{cfg: cfg, log: log, done: make(chan struct{})}
	if err := a.listen(); err != nil {
		return nil, err
	}
	a.warm("api", proxy.Pretouch)
	if a.db, err = storage.Open(ctx, cfg.DB); err != nil {
		a.closeListeners()
		return nil, err
	}
	if cfg.Migrate {
		from, to, err := a.db.Migrate(ctx)
		switch {
		case errors.Is(err, storage.ErrSchemaNewer):
			// A release rolled back, or starting beside a newer one mid
			// rollout: it serves on the newer schema (storage.ErrSchemaNewer).
			log.Warn("database schema is newer than this binary's; migrating nothing", "schema_version", from,
				"binary_schema_version", storage.BinaryVersion())
		case err != nil:
			a.db.Close()
			return nil, err
		}
		if from != to {
			log.Info("schema migrated", "from", from, "to", to)
		}
	}
	if cfg.RedisURL != "" {
		if a.redis, err = storage.OpenRedis(ctx, cfg.RedisURL); err != nil {
			a.db.Close()
			return nil, err
		}
	}
	if a.verifier, err = hotpath.NewVerifier(cfg.Keys, a.db); err != nil {
		a.db.Close()
		return nil, err
	}
	var store storage.FileStore = &storage.PGFileStore{DB: a.db}
	if st.Files.S3 != nil {
		s3, err := storage.NewS3FileStore(*st.Files.S3)
		if err == nil {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			err = s3.Check(cctx)
			ccancel()
		}
		if err != nil {
			a.db.Close()
			return nil, fmt.Errorf("files store: %w", err)
		}
		store = s3
	}
	a.files = &storage.Files{DB: a.db, Store: store, Now: cfg.now}
	a.janitor = &control.FileJanitor{Files: a.files, Log: log, Every: st.Files.JanitorInterval, Now: cfg.now}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	retention := &control.Retention{DB: a.db, Log: log, Every: cfg.RetentionInterval}
	// Invitation messages are delivered from the outbox when an SMTP server
	// is configured; without one they wait there for the operator.
	var mailer *outbox.Worker
	if st.SMTP.Enabled() {
		mailer = outbox.NewWorker(a.db, outbox.NewSMTP(st.SMTP), log, st.SMTP)
	}
	go func() {
		defer close(a.done)
		retained := make(chan struct{})
		go func() { defer close(retained); retention.Run(bg) }()
		mailed := make(chan struct{})
		go func() {
			defer close(mailed)
			if mailer != nil {
				mailer.Run(bg)
			}
		}()
		defer func() { <-mailed }()
		swept := make(chan struct{})
		go func() { defer close(swept); a.janitor.Run(bg) }()
		defer func() { <-swept }()
		watched := make(chan struct{})
		go func() { defer close(watched); a.db.WatchReplica(bg, storage.ReplicaCheckInterval, log) }()
		defer func() { <-watched }()
		returned := make(chan struct{})
		go func() {
			defer close(returned)
			if cfg.MemoryReturn > 0 {
				newMemoryReturn(cfg.MemoryReturn, log).Run(bg)
			}
		}()
		a.db.ListenKeys(bg, a.verifier, storage.ListenConfig{}, log)
		<-retained
		<-returned
	}()

	set := metrics.NewSet()
	a.metrics = set
	registerRuntimeMetrics(set, a)
	var tracer trace.Tracer // nil: tracing is off
	ledgerCfg := cfg.Ledger
	if cfg.tracingOn {
		if a.tracing, err = newTracerProvider(ctx, cfg.Tracing, buildCommit(), log); err != nil {
			a.shutdown()
			return nil, err
		}
		tracer = a.tracing.Tracer(proxy.TracerName)
		ledgerCfg.Tracer = a.tracing.Tracer(storage.TracerName)
		log.Info("exporting spans over OTLP", "protocol", cfg.Tracing.Protocol, "sample_ratio", cfg.Tracing.SampleRatio,
			"service_name", cfg.Tracing.ServiceName)
	}
	if a.ledger, err = storage.NewLedger(a.db, ledgerCfg, set, log); err != nil {
		a.shutdown()
		return nil, err
	}
	// Counters start from the ledger whenever the store lacks one.
	var counters meter.Counters = meter.NewMemoryCounters(a.ledger)
	if a.redis != nil {
		rc := storage.NewRedisCounters(storage.RedisCountersConfig{Client: a.redis, Prefix: "gw:", Seeder: a.ledger, Log: log})
		a.counters, counters = rc, rc
	}
	limits, err := meter.NewLimits(meter.LimitsConfig{Counters: counters, Plans: st.Plans, DefaultPlan: st.DefaultPlan, Tiers: tiers})
	if err != nil {
		a.shutdown()
		return nil, &configError{fmt.Errorf("config: %w", err)}
	}
	// With Redis a request waits on one round trip, its admission; its
	// settlement goes out after the answer.
	limits.Log, limits.AsyncFinish = log, a.redis != nil
	a.limits = limits
	set.NewGauge(`gateway_limits_unmetered_total`, func() float64 { return float64(limits.Unmetered.Load()) })
	edge := proxy.NewEdge(proxy.EdgeConfig{Verifier: a.verifier, Log: log, Metrics: set, AccessLog: cfg.AccessLog,
		Limits: limits, Usage: a.ledger, Tracer: tracer})
	a.edge = edge
	rt := proxy.NewRouter(edge)
	cat, err := proxy.NewCatalogue(tiers)
	if err != nil {
		a.shutdown()
		return nil, err
	}
	user := hotpath.Access{Auth: hotpath.AuthUser}
	user.Name = "models"
	rt.Handle(fasthttp.MethodGet, "/api/v1/models", user, cat.Native)
	user.Name = "models_openai"
	rt.HandleEitherVendor(fasthttp.MethodGet, "/v1/models", user, cat.OpenAI)
	user.Name = "model_openai"
	rt.HandleEitherVendor(fasthttp.MethodGet, "/v1/models/{id}", user, cat.Model)
	ups, err := a.buildUpstreams(st, log)
	if err != nil {
		a.shutdown()
		return nil, &configError{err}
	}
	for name, up := range ups {
		// 0 closed, 1 open, 2 half_open: alerting on > 0 finds a tier
		// whose traffic this process withholds.
		set.NewGauge(fmt.Sprintf(`gateway_breaker_state{tier=%q}`, name), func() float64 { return float64(up.Breaker.State()) })
	}
	var idem hotpath.IdempotencyStore = hotpath.NewMemoryIdempotency(cfg.IdempotencyTTL, 0)
	if a.redis != nil {
		idem = storage.NewRedisIdempotency(a.redis, "gw:", cfg.IdempotencyTTL, 0)
	}
	mem, embedder := buildMemory(st, ups, a.db, log)
	chat, err := proxy.NewChat(proxy.ChatConfig{Tiers: tiers, Upstreams: ups, Idempotency: idem, Log: log, Metrics: set,
		ConnsKept: true, Limits: limits, Usage: a.ledger, KeepAliveInterval: keepAliveInterval(cfg.StreamKeepAlive),
		Aux: proxy.AuxConfig{Embed: ups[hotpath.TierEmbed], Rerank: ups[hotpath.TierRerank], Guard: ups[hotpath.TierGuard],
			RerankShape: st.RerankShape, GuardConcurrency: st.GuardConcurrency, EmbedMaxDimensions: st.EmbedMaxDimensions},
		Gates: st.Gates,
		Files: a.files, MaxFileTokens: st.Files.MaxFileTokens, MaxTurnTokens: st.Files.MaxTurnTokens,
		MaxImageBytes: st.Files.MaxImageBytes, Memory: mem, Tracer: tracer})
	if err != nil {
		a.shutdown()
		return nil, err
	}
	chat.Register(rt)
	a.chat = chat
	filesAPI := st.Files.API
	filesAPI.Store, filesAPI.Now = store, cfg.now
	a.api = &control.API{DB: a.db, Keys: a.verifier, Log: log, Commit: buildCommit(), SignIn: st.SignIn,
		Limits: limits, Mail: control.MailConfig{PublicBaseURL: st.PublicBaseURL}, Files: filesAPI,
		Evals: a.startEvals(chat, log), Embed: embedder}
	if mailer != nil {
		a.api.Outbox = mailer
	}
	if a.status, err = a.newStatus(st.Status, ups, st.RerankShape); err != nil {
		a.shutdown()
		return nil, &configError{fmt.Errorf("config: %w", err)}
	}
	a.api.Status = a.status
	a.api.Register(rt)
	if cfg.StatusProbes {
		sctx, stopStatus := context.WithCancel(context.WithoutCancel(ctx))
		a.stopStatus, a.statusDone = stopStatus, make(chan struct{})
		go func() { defer close(a.statusDone); a.status.Run(sctx) }()
	}

	// A connection whose stream completed serves the client's next request.
	a.server = proxy.NewServer(proxy.ServerConfig{ReadTimeout: cfg.ReadTimeout, IdleTimeout: cfg.IdleTimeout,
		MaxBodySize: cfg.MaxBodySize, MaxHeaderBytes: cfg.MaxHeaderBytes, MaxURIBytes: cfg.MaxURIBytes,
		Logger: fasthttpLogger{log}, LargeBodies: uploadBodies(&filesAPI, st.Files.UploadReadTimeout)}, rt, chat)
	// Running out of descriptors under overload pauses accepting; it must
	// never end it.
	accept := proxy.KeepAccepting(a.ln, log)
	a.accept = accept
	set.NewGauge(`gateway_accept_retries_total`, func() float64 { return float64(accept.Retries.Load()) })
	a.warming.Wait()
	go func() {
		if err := a.server.Serve(accept); err != nil {
			log.Error("api listener stopped", "err", err)
		}
	}()
	if a.adminLn != nil {
		a.startAdmin(set)
	}
	log.Info("listening", "addr", a.ln.Addr().String(), "admin_addr", cfg.AdminAddr, "commit", buildCommit())
	return a, nil
}

// Addr is the API listener's address.
func (a *app) Addr() string { return a.ln.Addr().String() }

func (a *app) startAdmin(set *metrics.Set) {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		set.WritePrometheus(w)
		metrics.WriteProcessMetrics(w)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	// The command line is not served: flags can carry secrets
	// (--database-url's password, --otel-headers' credentials).
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	a.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.admin.Serve(a.adminLn) }()
}

// closeListeners closes listeners that were bound but never served.
func (a *app) closeListeners() {
	if a.ln != nil {
		_ = a.ln.Close()
	}
	if a.adminLn != nil {
		_ = a.adminLn.Close()
	}
}

// shutdown drains and stops in the reverse order of start. Calling it again
// does nothing.
func (a *app) shutdown() { a.stopOnce.Do(a.stop) }

// cutWait bounds how long shutdown waits, once --shutdown-timeout has
// passed and the upstream calls still running were cut, for their requests
// and streams to answer and log their rows.
const cutWait = 5 * time.Second

func (a *app) stop() {
	if a.stopStatus != nil {
		// Give the probing lead up first, so another process takes it
		// while this one drains.
		a.stopStatus()
		<-a.statusDone
	}
	if a.status != nil {
		// A lead taken by a caller of RunOnce (not Run) is given up too:
		// the pool cannot close under the lock's connection.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.status.Close(ctx)
		cancel()
	}
	if a.api != nil {
		// The grace: /api/ready answers 503 at once so load balancers stop
		// sending new connections, while everything is still served and
		// every answer (and every stream that ends) closes its connection,
		// so clients come back through the load balancer elsewhere.
		a.api.Drain()
		if a.edge != nil {
			a.edge.Drain()
		}
		if a.chat != nil {
			a.chat.StartDrain()
		}
		if a.cfg.DrainDelay > 0 {
			time.Sleep(a.cfg.DrainDelay)
		}
	}
	if a.server == nil {
		a.closeListeners() // bound, never served
	}
	if a.server != nil && a.ln != nil {
		// Then the listener closes; a request still arriving on a kept
		// connection is refused 503 server_shutting_down before it starts.
		a.edge.StopServing()
		if a.chat != nil {
			a.chat.StopKeepAlive() // streams that end now close their connections
		}
		// A connection that has sent nothing has nothing to answer; the
		// server would wait for it until the read timeout.
		if a.accept != nil {
			a.accept.CloseUnused()
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
		served := true
		if err := a.server.ShutdownWithContext(ctx); err != nil {
			a.log.Warn("requests still in flight at shutdown", "err", err)
			served = false
		}
		// Streams own their connections: the server's shutdown does not
		// wait for them, so wait here, within the same bound.
		if a.chat != nil && !a.chat.Drain(ctx) {
			a.log.Warn("streams still open at shutdown")
			served = false
		}
		cancel()
		if !served && a.chat != nil {
			// What still waits on an upstream is cut, and ends now:
			// answered server_shutting_down (a stream with its wire's
			// failure ending), its ledger row written below.
			a.chat.Cut()
			ctx, cancel := context.WithTimeout(context.Background(), cutWait)
			if !a.server.WaitIdle(ctx) || !a.chat.Drain(ctx) {
				a.log.Warn("requests still running after the upstream calls were cut")
			}
			cancel()
		}
		if a.chat != nil {
			a.chat.Close()
		}
	}
	a.stopEvals()
	if a.admin != nil {
		_ = a.admin.Close()
	} else if a.adminLn != nil && a.server != nil {
		_ = a.adminLn.Close()
	}
	if a.sim != nil {
		a.sim.Shutdown()
	}
	if a.ledger != nil {
		// Every request has ended: its row is queued. Write them all, or
		// spool what PostgreSQL cannot take now for the next start.
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
		if err := a.ledger.Close(ctx); err != nil {
			a.log.Error("request-log rows left in the spool at shutdown", "err", err)
		}
		cancel()
	}
	if a.tracing != nil {
		// After the ledger: its last writes' spans go out too.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.tracing.Shutdown(ctx); err != nil {
			a.log.Warn("spans left unexported at shutdown", "err", err)
		}
		cancel()
	}
	if a.limits != nil {
		a.limits.Wait()
	}
	if a.counters != nil {
		a.counters.Close()
	}
	if a.cancel != nil {
		a.cancel()
		<-a.done
	}
	if a.verifier != nil {
		a.verifier.Close()
	}
	if a.redis != nil {
		a.redis.Close()
	}
	a.db.Close()
}

func registerRuntimeMetrics(set *metrics.Set, a *app) {
	set.NewGauge("gateway_key_cache_live", func() float64 {
		if a.verifier != nil && a.verifier.Live() {
			return 1
		}
		return 0
	})
	stat := func(f func(hotpath.VerifierStats) uint64) func() float64 {
		return func() float64 { return float64(f(a.verifier.Stats())) }
	}
	set.NewGauge("gateway_key_cache_hits_total", stat(func(s hotpath.VerifierStats) uint64 { return s.Hits }))
	set.NewGauge("gateway_key_cache_misses_total", stat(func(s hotpath.VerifierStats) uint64 { return s.Misses }))
	set.NewGauge("gateway_key_cache_stale_served_total", stat(func(s hotpath.VerifierStats) uint64 { return s.StaleServed }))
	set.NewGauge("gateway_key_lookup_errors_total", stat(func(s hotpath.VerifierStats) uint64 { return s.LookupErrors }))
	set.NewGauge("gateway_db_pool_acquired_conns", func() float64 { return float64(a.db.Pool.Stat().AcquiredConns()) })
	set.NewGauge("gateway_db_pool_total_conns", func() float64 { return float64(a.db.Pool.Stat().TotalConns()) })
	set.NewGauge("gateway_db_pool_idle_conns", func() float64 { return float64(a.db.Pool.Stat().IdleConns()) })
	set.NewGauge("gateway_db_pool_max_conns", func() float64 { return float64(a.db.Pool.Stat().MaxConns()) })
	// Acquires that found no idle connection and waited, and the time all
	// acquires waited: a pool too small shows here before it times out.
	set.NewGauge("gateway_db_pool_acquires_total", func() float64 { return float64(a.db.Pool.Stat().AcquireCount()) })
	set.NewGauge("gateway_db_pool_empty_acquires_total", func() float64 { return float64(a.db.Pool.Stat().EmptyAcquireCount()) })
	set.NewGauge("gateway_db_pool_acquire_wait_seconds_total", func() float64 { return a.db.Pool.Stat().AcquireDuration().Seconds() })
	set.NewGauge("gateway_db_pool_canceled_acquires_total", func() float64 { return float64(a.db.Pool.Stat().CanceledAcquireCount()) })
	if ok, _, _, _ := a.db.ReplicaStats(); ok {
		set.NewGauge("gateway_db_replica_lag_seconds", func() float64 {
			_, lag, _, _ := a.db.ReplicaStats()
			return lag.Seconds() // negative while the replica cannot be measured
		})
		set.NewGauge("gateway_db_replica_reads_total", func() float64 {
			_, _, reads, _ := a.db.ReplicaStats()
			return float64(reads)
		})
		set.NewGauge("gateway_db_replica_fallbacks_total", func() float64 {
			_, _, _, fallbacks := a.db.ReplicaStats()
			return float64(fallbacks)
		})
	}
}

// fasthttpLogger routes fasthttp's own messages (connection errors) to slog.
// Only the format is logged: fasthttp's arguments can quote raw request
// bytes, headers and keys included.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, _ ...any) {
	l.log.Debug(strings.TrimSpace(format), "source", "fasthttp")
}

// uploadBodies gives the upload route, on both versions, a body bound of
// its own: the per-file limit and the form around it.
func uploadBodies(f *control.FilesConfig, readTimeout time.Duration) []proxy.LargeBody {
	var out []proxy.LargeBody
	for _, p := range []string{"/api/v1/files", "/api/v2/files"} {
		out = append(out, proxy.LargeBody{Method: fasthttp.MethodPost, Path: p, MaxBodySize: f.MaxUploadBody(),
			ReadTimeout: readTimeout})
	}
	return out
}
