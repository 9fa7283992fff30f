package server

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx": the hints' NOTIFY pool
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/gantryhq/gantry/workspace/api"
	"github.com/gantryhq/gantry/workspace/auth"
	"github.com/gantryhq/gantry/workspace/handoff"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/reconcile"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
	"github.com/gantryhq/gantry/workspace/urgency"
)

// The store is every component's store; the gate is the store's.
var (
	_ api.APIStore              = (*store.Store)(nil)
	_ api.AccountStore          = (*store.Accounts)(nil)
	_ AdminStore                = (*store.Accounts)(nil)
	_ store.Gate                = (*urgency.Gate)(nil)
	_ reconcile.ReconcilerStore = (*store.Store)(nil)
	_ singletons.MonitorStore   = (*store.Store)(nil)
	_ singletons.TTLStore       = (*store.Store)(nil)
	_ singletons.LeaderStore    = (*store.Store)(nil)
)

// The process provider dials workspace ports from inside their network
// namespaces; the proxy goes through it.
var _ api.PortDialer = (*process.Container)(nil)

// ServerConfig configures `gantry ws serve`. Zero values are defaults.
type ServerConfig struct {
	// DB is "sqlite:PATH" or "postgres://…"; "" = sqlite:<Data>/workspaces.db.
	DB string
	// Data holds volumes/, archives/ and run/ (pidfiles); "" = "gantry-ws-data".
	Data string
	// Listen is the API address; "" = 127.0.0.1:7480. An address other
	// than loopback needs TLS (TLSCert, TLSKey) or InsecureListen.
	// AppsDomain D gives each workspace's app its own origin,
	// {name}--{owner}.D on Listen's port (package api, apps.go); the API's
	// page is then reached at D itself for app logins. "" = "localhost" on
	// a loopback Listen (*.localhost resolves to loopback), none otherwise.
	AppsDomain string
	Listen     string
	// TLSCert and TLSKey are PEM files: the API is served over HTTPS.
	TLSCert, TLSKey string
	// InsecureListen allows plain HTTP on a non-loopback address (a
	// TLS-terminating proxy is in front).
	InsecureListen bool
	// ReadHeaderTimeout bounds reading a request's headers; zero = 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body, but
	// for the streams (API.IsStream: the proxy, app hosts, exec, a followed log,
	// SSE): a body that trickles in is cut. Zero = 30 s (a body is at
	// most 1 MiB); negative = none.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the answer to a request but a stream
	// (from the end of its headers); zero = 60 s, negative = none.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long; zero =
	// 60 s, negative = none.
	IdleTimeout time.Duration
	// MaxConns bounds the open API connections; MaxConnsPerAddr those
	// from one remote IP address (loopback too). One past a limit gets a
	// 503 that names it and is closed. Zero = 4096 (at most half the
	// process's file descriptor limit) and 256; negative = no limit.
	MaxConns, MaxConnsPerAddr int
	// Quotas per owner (zero fields: unlimited).
	Quotas auth.Quotas
	// AuditRetention is how long audit rows are kept; zero = 90 days,
	// negative = forever. The leader removes older rows.
	AuditRetention time.Duration
	// Archives: the GC of archives (ArchiveGC; its Store and Storage are
	// filled in). Used when the Storage keeps archives.
	Archives singletons.ArchiveGC
	// Redis, if set (redis://…), carries hints instead of the in-process
	// channel or Postgres LISTEN/NOTIFY.
	Redis      string
	Reconciler reconcile.Config
	Monitor    singletons.MonitorConfig
	// TTL configures the TTL manager (idle → STANDBY, long STANDBY →
	// PENDING); its zero value has the documented defaults.
	TTL singletons.TTLConfig
	// PoolInterval is how often the leader refills the warm pools; zero =
	// 500 ms.
	PoolInterval time.Duration
	// LeaderLease bounds the handover of the monitor and the TTL manager
	// between replicas on Postgres; zero = 10 s. Unused on SQLite.
	LeaderLease time.Duration
	// InsecureSharedUser lets workspaces of several owners run on a
	// Container that does not contain them from each other and from the
	// server (the process provider when the server is not root, or with
	// SharedUser; tenancy.go). Without it, such a server is one owner's.
	InsecureSharedUser bool
	// Registry, if set, receives the reconciler's and the singletons'
	// metrics (NewMetrics).
	Registry prometheus.Registerer
	// Container and Storage are the providers, already built (required;
	// DefaultProviders are the process and fs ones under Data).
	Container provider.Container
	Storage   provider.Storage
	// Page, if set, builds what is mounted at / beside the API (the live
	// page, SSE, /metrics, probes) from the server's store and hint bus;
	// its run, if not nil, runs with the server and is waited for.
	Page   func(st *store.Store, h hints.Bus) (page http.Handler, run func(context.Context) error, err error)
	Logger *slog.Logger
	// Ready, if set, receives the bound API address once listening.
	Ready func(addr string)
}

// Server is the API, reconciler, monitor, TTL manager and hints in one
// process. The reconciler runs on every replica; the monitor and the TTL
// manager only on the leader (RunSingletons).
type Server struct {
	cfg   ServerConfig
	Store *store.Store
	API   *api.API
	Rec   *reconcile.Reconciler
	Mon   *singletons.HealthMonitor
	TTL   *singletons.TTLManager
	hints hints.Bus
	runs  []func(context.Context) error
	// closers run after Run has drained (the Redis client).
	closers []func()
	// unlockData ends this server's hold of its SQLite database
	// (dblock.go), after everything else.
	unlockData func()
}

// Hints is the server's hint bus (the live page's event hub subscribes).
func (s *Server) Hints() hints.Bus { return s.hints }

// ConfigError is a ServerConfig field NewServer or Run refuses, or whose
// resource (the data directory, the database, the address) fails; the CLI
// names its flag instead.
type ConfigError struct {
	Field string // the ServerConfig field, e.g. "Data", "Listen"
	Err   error
}

func (e *ConfigError) Error() string { return "ServerConfig." + e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// DefaultProviders are the process container and the fs storage under
// data: volumes/, blobs/ (archives) and run/ (pidfiles).
func DefaultProviders(data string) (provider.Container, provider.Storage) {
	return &process.Container{RunDir: filepath.Join(data, "run")},
		&archive.Storage{Root: filepath.Join(data, "volumes"), Blobs: &fs.BlobStore{Dir: filepath.Join(data, "blobs")}}
}

// NewServer opens the store and wires the parts.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	cfg, err := cfg.checked()
	if err != nil {
		return nil, err
	}
	unlock, err := lockDB(cfg.DB) // dblock.go
	if err != nil {
		return nil, err
	}
	// One gate: a user's change in flight through the API, and the
	// reconcile steps that follow it, hold the store's bulk batches and
	// the reconciler's bulk steps back (package urgency).
	gate := urgency.NewGate(0)
	st, err := openStore(ctx, cfg, gate) // tenancy.go
	if err != nil {
		unlock()
		return nil, err
	}
	s := &Server{cfg: cfg, Store: st, unlockData: unlock}
	if err := s.wire(ctx, gate); err != nil {
		for _, c := range s.closers {
			c()
		}
		st.Close()
		unlock()
		return nil, err
	}
	return s, nil
}

// checked is cfg with its defaults, refused if a field is wrong; it makes
// the data directory.
func (cfg ServerConfig) checked() (ServerConfig, error) {
	if cfg.Data == "" {
		cfg.Data = "gantry-ws-data"
	}
	if cfg.DB == "" {
		cfg.DB = "sqlite:" + filepath.Join(cfg.Data, "workspaces.db")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:7480"
	}
	if cfg.AppsDomain == "" && auth.CheckListen(cfg.Listen, false, false) == nil {
		cfg.AppsDomain = "localhost"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.connDefaults() // listener.go
	if abs, err := filepath.Abs(cfg.Data); err == nil {
		cfg.Data = abs
	}
	if err := checkTransport(cfg); err != nil {
		return cfg, err
	}
	if cfg.Container == nil {
		return cfg, &ConfigError{Field: "Container", Err: errors.New("required (see DefaultProviders)")}
	}
	if cfg.Storage == nil {
		return cfg, &ConfigError{Field: "Storage", Err: errors.New("required (see DefaultProviders)")}
	}
	if err := mkdirAll(cfg.Data); err != nil {
		return cfg, &ConfigError{Field: "Data", Err: fmt.Errorf("%s: %w", cfg.Data, err)}
	}
	return cfg, nil
}

// wire makes the first admin token, the hint bus, the reconciler, the
// singletons, the API and the page over s.Store.
func (s *Server) wire(ctx context.Context, gate *urgency.Gate) error {
	cfg, st := s.cfg, s.Store
	if err := ensureAdminToken(ctx, st.Accounts(), cfg.Data, cfg.Logger, time.Now()); err != nil {
		return err
	}
	if err := s.startHints(cfg); err != nil {
		return err
	}
	s.hintExits(cfg.Container)
	metrics := reconcile.NewMetrics(cfg.Registry)
	cfg.Reconciler.Logger, cfg.Reconciler.Metrics, cfg.Reconciler.Gate = cfg.Logger, metrics, gate
	cfg.Monitor.Logger, cfg.Monitor.Metrics = cfg.Logger, metrics
	// One mailbox: the reconciler and the monitor leave each other the
	// rows their hints announce (package handoff).
	box := handoff.New()
	cfg.Reconciler.Handoff, cfg.Monitor.Handoff = box, box
	cfg.TTL.Logger, cfg.TTL.Hints = cfg.Logger, s.hints
	var err error
	if s.Rec, err = reconcile.NewReconciler(cfg.Reconciler, st, cfg.Container, cfg.Storage, s.hints); err != nil {
		return err
	}
	s.Mon = singletons.NewHealthMonitor(cfg.Monitor, st, cfg.Container, cfg.Storage, s.hints)
	if s.TTL, err = singletons.NewTTLManager(cfg.TTL, st); err != nil {
		return err
	}
	ac := apiConfig(cfg, st, gate, s.hints)
	if ac.SSHHostKey, err = sshHostKey(cfg.Data); err != nil { // sshkey.go
		return err
	}
	s.API = api.NewAPI(ac)
	retention := &singletons.Retention{Store: st.Accounts(), Audit: cfg.AuditRetention, Logger: cfg.Logger}
	loops := singletons.SingletonsConfig{Store: st, Monitor: s.Mon, TTL: s.TTL, Retention: retention, Lease: cfg.LeaderLease,
		NodeID: s.Rec.Config().Owner, Metrics: metrics, Logger: cfg.Logger, ArchiveGC: archiveGC(cfg, st),
		Pools: poolFiller(cfg, st, s.hints)}
	s.runs = append(s.runs, s.Rec.Run, func(ctx context.Context) error { return singletons.RunSingletons(ctx, loops) })
	if cfg.Page != nil {
		page, run, err := cfg.Page(st, s.hints)
		if err != nil {
			return &ConfigError{Field: "Page", Err: err}
		}
		s.API.Handle("/", page)
		if run != nil {
			s.runs = append(s.runs, run)
		}
	}
	s.cfg = cfg
	return nil
}

// archiveGC is the server's archive GC, if its storage keeps archives.
func archiveGC(cfg ServerConfig, st *store.Store) *singletons.ArchiveGC {
	as, ok := cfg.Storage.(provider.ArchiveStore)
	if !ok {
		return nil
	}
	gc := cfg.Archives
	gc.Store, gc.Storage, gc.Logger = st, as, cfg.Logger
	return &gc
}

// Close releases a server that was made but not Run (Run releases its own
// when it returns): what wire opened, the store and the database's lock.
func (s *Server) Close() {
	for _, c := range s.closers {
		c()
	}
	s.Store.Close()
	s.unlockData()
}

// Run serves until ctx ends, then drains: the API stops accepting, the
// reconciler waits for provider calls in flight, the store closes.
func (s *Server) Run(ctx context.Context) error {
	defer s.unlockData() // last: the next server on the database starts on a closed store
	defer s.Store.Close()
	defer func() {
		for _, c := range s.closers {
			c()
		}
	}()
	tcp, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return &ConfigError{Field: "Listen", Err: fmt.Errorf("%s: %w", s.cfg.Listen, err)}
	}
	ln := newLimitListener(tcp, s.cfg.MaxConns, s.cfg.MaxConnsPerAddr)
	if _, port, err := net.SplitHostPort(s.cfg.Listen); err == nil && port == "0" {
		// --listen …:0: the apps' URLs carry the port the system chose.
		cfg := s.cfg
		cfg.Listen = ln.Addr().String()
		s.API.SetAppsURL(appsURL(cfg))
	}
	srv := httpServer(s.cfg, s.API) // listener.go: timeouts, the limits' 503
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	scheme := "http"
	if s.cfg.TLSCert != "" {
		scheme = "https"
	}
	s.cfg.Logger.Info("workspace: serving", "url", scheme+"://"+ln.Addr().String(), "db", s.Store.Dialect().String(), "data", s.cfg.Data)
	if s.cfg.InsecureListen && s.cfg.TLSCert == "" && auth.CheckListen(s.cfg.Listen, false, false) != nil {
		s.cfg.Logger.Warn("workspace: plain HTTP on a non-loopback address (--insecure-listen): tokens cross the network in clear unless a TLS proxy is in front", "addr", ln.Addr().String())
	}
	if s.cfg.Ready != nil {
		s.cfg.Ready(ln.Addr().String())
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, run := range s.runs {
		wg.Add(1)
		go func() { defer wg.Done(); run(runCtx) }()
	}
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSCert != "" {
			errc <- srv.ServeTLS(ln, s.cfg.TLSCert, s.cfg.TLSKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shut, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	srv.Shutdown(shut)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// mkdirAll makes the data directory, mode 0700 (an existing one too): it
// holds the admin token, the database, logs, archives and volumes. (The
// process provider's workspaces reach their own volume through a mount
// namespace of their own, not through this directory's permissions.)
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// startHints picks the hint bus: Redis if configured, else Postgres
// LISTEN/NOTIFY on a Postgres store, else the in-process hub.
func (s *Server) startHints(cfg ServerConfig) error {
	switch {
	case cfg.Redis != "":
		opt, err := rueidis.ParseURL(cfg.Redis)
		if err != nil {
			return &ConfigError{Field: "Redis", Err: fmt.Errorf("%q: %w", cfg.Redis, err)}
		}
		opt.DisableCache = true
		client, err := rueidis.NewClient(opt)
		if err != nil {
			return &ConfigError{Field: "Redis", Err: fmt.Errorf("%q: %w", cfg.Redis, err)}
		}
		s.closers = append(s.closers, client.Close)
		rh := &hints.Redis{Client: client, Logger: cfg.Logger}
		s.hints = rh
		s.runs = append(s.runs, rh.Run)
	case s.Store.Dialect() == store.Postgres:
		// NOTIFY goes out on a pool of its own: the store's connections
		// are the store's. Plain hints leave in batches from one
		// goroutine; urgent ones each at once.
		db, err := sql.Open("pgx", s.Store.DSN())
		if err != nil {
			return &ConfigError{Field: "DB", Err: err}
		}
		db.SetMaxOpenConns(8)
		db.SetMaxIdleConns(8)
		s.closers = append(s.closers, func() { db.Close() })
		ph := &hints.Postgres{DB: db, DSN: s.Store.DSN(), Logger: cfg.Logger}
		s.hints = ph
		s.runs = append(s.runs, ph.Run)
	default:
		s.hints = hints.NewLocal()
	}
	return nil
}

// apiConfig is the API's configuration under cfg. The session cookie is
// Secure under TLS, and with InsecureListen (a TLS proxy is in front).
func apiConfig(cfg ServerConfig, st *store.Store, gate *urgency.Gate, h hints.Bus) api.APIConfig {
	return api.APIConfig{Store: apiStore(cfg, st), Accounts: st.Accounts(), Templates: st.Templates(), Pools: apiPools(cfg, st),
		Storage: cfg.Storage, Container: cfg.Container, Hints: h, Gate: gate, Quotas: cfg.Quotas,
		SecureCookies: cfg.TLSCert != "" || cfg.InsecureListen, AppsURL: appsURL(cfg), Logger: cfg.Logger}
}

// apiPools is the API's warm pools: none on a server whose workspaces share
// its user over one owner (oneOwner), where a claim would bypass that check.
func apiPools(cfg ServerConfig, st *store.Store) api.PoolStore {
	if why := sharedUser(cfg.Container); why != nil && !cfg.InsecureSharedUser {
		return nil
	}
	return st.Pools()
}

// poolFiller is the leader's refill of the warm pools (none where the API
// keeps none).
func poolFiller(cfg ServerConfig, st *store.Store, h hints.Bus) *singletons.PoolFiller {
	if apiPools(cfg, st) == nil {
		return nil
	}
	f := &singletons.PoolFiller{Pools: st.Pools(), Templates: st.Templates(), Hints: h, Logger: cfg.Logger, Interval: cfg.PoolInterval}
	if fk, ok := cfg.Storage.(provider.Forker); ok {
		f.Files = fk
	}
	if ad, ok := cfg.Container.(provider.Adopter); ok {
		f.Adopter = ad
	}
	if as, ok := cfg.Storage.(provider.ArchiveStore); ok {
		f.Drop = as.DeleteArchive
	}
	return f
}

// appsURL is the API's AppsURL under cfg: AppsDomain on Listen's port.
func appsURL(cfg ServerConfig) string {
	_, port, err := net.SplitHostPort(cfg.Listen)
	if cfg.AppsDomain == "" || err != nil {
		return ""
	}
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(cfg.AppsDomain, port)
}

// hintExits has a provider that learns of its workspaces' changes (a
// process's command ended, a Pod changed) hint the monitor, so a crash is
// observed at once, not at the next pass.
func (s *Server) hintExits(c provider.Container) {
	if cn, ok := c.(provider.ChangeNotifier); ok {
		h := s.hints
		cn.OnChange(func(id string) { h.Publish(context.Background(), hints.ChanMonitor, id) })
	}
}
