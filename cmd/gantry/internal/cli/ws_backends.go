package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	wsclient "github.com/gantryhq/gantry/workspace/client"
	"github.com/gantryhq/gantry/workspace/hints"
	"github.com/gantryhq/gantry/workspace/live"
	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/docker"
	"github.com/gantryhq/gantry/workspace/provider/process"
	"github.com/gantryhq/gantry/workspace/server"
	"github.com/gantryhq/gantry/workspace/singletons"
	"github.com/gantryhq/gantry/workspace/store"
)

// wsBackendFlags selects the real backends of `gantry ws serve`:
// --provider docker and --storage s3://bucket?endpoint=…
type wsBackendFlags struct {
	storage       string
	dockerImage   string
	dockerNetwork string
	dockerEgress  bool
	cpus          float64
	memory        string
	pids          int64
	idleTimeout   time.Duration
	archiveAfter  time.Duration
	ttlInterval   time.Duration
	leaderLease   time.Duration
	kube          kubeFlags
	// The process provider's containment (process/contain.go).
	workspaceUIDs    string
	workspaceNetwork string
	sharedUser       bool
}

func (b *wsBackendFlags) register(f *pflag.FlagSet) {
	f.StringVar(&b.storage, "storage", "fs", "archive storage: fs (under --data) or s3://bucket[/prefix]?endpoint=http://host:port[&create=true] (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
	f.StringVar(&b.dockerImage, "docker-image", "", "default image for --provider docker when a workspace names none")
	f.Float64Var(&b.cpus, "default-cpus", 0, "CPUs per workspace (e.g. 1.5; 0 = no limit; --provider docker only)")
	f.StringVar(&b.memory, "default-memory", "", "memory per workspace (e.g. 2GiB; docker: past it the kernel kills and the workspace shows OOMKilled; process: the address space of each process); default no limit")
	f.Int64Var(&b.pids, "default-pids", 0, "processes and threads per workspace (0 = no limit; process provider: RLIMIT_NPROC of the workspace's user, refused as root with --insecure-shared-user)")
	f.StringVar(&b.dockerNetwork, "docker-network", "", "network of every workspace container (\"none\": no network, no proxy); default a network per owner, internal unless --docker-egress, which only the owner's containers and the server reach")
	f.BoolVar(&b.dockerEgress, "docker-egress", false, "--provider docker: give the owner networks outside access (NAT); other owners' containers stay unreachable")
	f.DurationVar(&b.idleTimeout, "idle-timeout", singletons.DefaultIdleTimeout, "TTL: a RUNNING workspace idle this long gets desired STANDBY (negative = never)")
	f.DurationVar(&b.archiveAfter, "archive-after", singletons.DefaultArchiveAfter, "TTL: a workspace STANDBY this long gets desired PENDING (negative = never)")
	f.DurationVar(&b.ttlInterval, "ttl-interval", singletons.DefaultTTLInterval, "TTL: time between the TTL manager's passes")
	f.StringVar(&b.workspaceUIDs, "workspace-uids", process.DefaultUIDs.String(), "process provider, server run as root: the user ids workspaces run as, one each (FIRST-LAST)")
	f.StringVar(&b.workspaceNetwork, "workspace-network", "private", "process provider, server run as root: a workspace's network: private (a namespace of its own with only loopback: no other network; the proxy reaches its PORT) or host (the host's: it reaches the API, the other workspaces' ports and the host's loopback services directly)")
	f.BoolVar(&b.sharedUser, "insecure-shared-user", false, "process provider: run every workspace as the server's own user (no user or namespaces of its own: it can read the server's data and the other workspaces' files) and allow several owners anyway (without it, a server not run as root is one owner's)")
	b.kube.register(f)
	f.DurationVar(&b.leaderLease, "leader-lease", 10*time.Second, "Postgres: the monitor and TTL manager run on one replica (leader lock); a standby takes over within this after the leader dies")
}

// singletons sets the TTL manager's and the leader election's settings.
func (b *wsBackendFlags) singletons(cfg *server.ServerConfig) error {
	if b.ttlInterval <= 0 || b.leaderLease <= 0 {
		return fmt.Errorf("--ttl-interval %v, --leader-lease %v: want positive durations", b.ttlInterval, b.leaderLease)
	}
	cfg.TTL = singletons.TTLConfig{IdleTimeout: b.idleTimeout, ArchiveAfter: b.archiveAfter, Interval: b.ttlInterval}
	cfg.LeaderLease = b.leaderLease
	return nil
}

// apply builds the providers: the process container and fs storage under
// --data (server.DefaultProviders), cfg.Storage for --storage s3://…
// (volumes stay directories under --data), cfg.Container for --provider
// docker (bind-mounting those volume directories), both for --provider
// kubernetes; --provider fake has set both already.
func (b *wsBackendFlags) apply(ctx context.Context, cfg *server.ServerConfig, prov string, log *slog.Logger) error {
	if prov == "kubernetes" {
		mem, err := b.memoryLimit()
		if err != nil {
			return err
		}
		return b.kube.apply(ctx, cfg, b.storage, b.cpus, mem, log)
	}
	// Docker bind mounts and pidfiles need absolute host paths.
	abs, err := filepath.Abs(cmp.Or(cfg.Data, "gantry-ws-data"))
	if err != nil {
		return err
	}
	cfg.Data = abs
	if cfg.Container == nil { // not --provider fake
		cfg.Container, cfg.Storage = server.DefaultProviders(abs)
	}
	switch {
	case b.storage == "" || b.storage == "fs":
	case strings.HasPrefix(b.storage, "s3://"):
		blobs, err := openBlobs(ctx, b.storage, log)
		if err != nil {
			return fmt.Errorf("--storage: %w", err)
		}
		cfg.Storage = &archive.Storage{Root: filepath.Join(abs, "volumes"), Blobs: blobs}
	default:
		return fmt.Errorf("--storage %q: want fs or s3://bucket?endpoint=http://host:port", b.storage)
	}
	mem, err := b.memoryLimit()
	if err != nil {
		return err
	}
	cfg.InsecureSharedUser = b.sharedUser
	if prov != "docker" {
		return b.processContainer(cfg, provider.Limits{CPUs: b.cpus, Memory: mem, Pids: b.pids})
	}
	c, err := docker.New(docker.Config{Image: b.dockerImage, NetworkMode: b.dockerNetwork, NetworkEgress: b.dockerEgress, CPUs: b.cpus, Memory: mem, Pids: b.pids, Logger: log})
	if err != nil {
		return fmt.Errorf("--provider docker: %w", err)
	}
	cfg.Container = c
	return nil
}

// processContainer sets up the process container (server.DefaultProviders'):
// its default limits, refusing those it cannot enforce (process/limits.go),
// and how it contains workspaces (process/contain.go).
func (b *wsBackendFlags) processContainer(cfg *server.ServerConfig, l provider.Limits) error {
	pc, ok := cfg.Container.(*process.Container)
	if !ok {
		return nil // --provider fake
	}
	uids, err := process.ParseIDRange(b.workspaceUIDs)
	if err != nil {
		return fmt.Errorf("--workspace-uids: %w", err)
	}
	network, err := process.ParseNetwork(b.workspaceNetwork)
	if err != nil {
		return fmt.Errorf("--workspace-network: %w", err)
	}
	pc.Defaults, pc.UIDs, pc.Network, pc.SharedUser = l, uids, network, b.sharedUser
	if err := pc.CheckLimits(provider.Limits{}); err != nil {
		return fmt.Errorf("--default-cpus/--default-memory/--default-pids: %w", err)
	}
	return nil
}

// memoryLimit is --default-memory in bytes (0: none).
func (b *wsBackendFlags) memoryLimit() (int64, error) {
	if b.memory == "" {
		return 0, nil
	}
	n, err := parseSize(b.memory)
	if err != nil {
		return 0, fmt.Errorf("--default-memory: %w", err)
	}
	return n, nil
}

// livePage is the operators' surface of `ws serve`, mounted at / beside
// the API: the web page (it drives the /v1 API), SSE at /events and
// /workspaces/{id}/events, /metrics (on the process registry), /healthz and
// /readyz. Its event hub follows the server's hints and resyncs every second.
func livePage(env *Env) func(*store.Store, hints.Bus) (http.Handler, func(context.Context) error, error) {
	return func(st *store.Store, h hints.Bus) (http.Handler, func(context.Context) error, error) {
		l, err := live.NewServer(live.Config{Store: st, Hints: h, Registry: env.Registry, ResyncInterval: time.Second, Logger: env.Logger})
		if err != nil {
			return nil, nil, err
		}
		return l, l.Run, nil
	}
}

// newWSTouchCmd records user activity (resets the TTL idle clock).
func newWSTouchCmd(client func() *wsclient.Client) *cobra.Command {
	return idCmd("touch", "Record activity on a workspace so the TTL manager does not stop or archive it", func(ctx context.Context, id string) error {
		return client().Touch(ctx, id)
	})
}
