// Package docker runs workspaces as Docker containers: the provider.Container
// the reconciler uses when `gantry ws serve --provider docker` is chosen.
//
// One workspace is one container named "ws-{id}", labelled
// "gantry.workspace-id={id}", with the workspace's volume mounted at
// /home/coder (a bind mount of the host directory the Storage owns, or a
// Docker volume "ws-{id}-home"), restart policy "no" and no published port.
// By default it joins its owner's own network and runs as a non-root user
// with every capability dropped and no-new-privileges (contain.go).
// "Stop" in the reconciler's sense removes the container and keeps the volume,
// as the seed's InstanceController does.
//
// Tour:
//
//	docker.go   Config, New, Start (idempotent, waits for running/healthy),
//	            Stop (remove, keep volume), Observe (by label), errors
//	contain.go  what contains a workspace: its owner's network (made on
//	            demand, removed when unused), its user, its volume's owner
//	access.go   Endpoint, Logs, Exited: reaching a running container
//	exec.go     Exec: a command in the container
//
// The engine is found again after a gantry restart because every fact lives
// in Docker itself: Observe lists containers by label, never from memory.
//
// Client version: github.com/moby/moby/client v0.6.2 speaks API 1.40 to 1.56
// and negotiates down on the first request, so the Docker 20.10 engine on the
// project's machines (API 1.41) works with the newest client; the test
// TestNegotiatesEngineAPI checks this against the real engine.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/internal/clock"
	"github.com/gantryhq/gantry/workspace/provider"
)

// LabelWorkspaceID is put on every container and volume this package
// creates; its value is the workspace id.
const LabelWorkspaceID = "gantry.workspace-id"

// VolumeMode says how the workspace's files reach the container.
type VolumeMode int

const (
	// BindMount mounts Spec.VolumeDir (the Storage's host directory), so the
	// archive code reads the same files the container wrote. The default.
	BindMount VolumeMode = iota
	// DockerVolume mounts a named Docker volume "ws-{id}-home" (created on
	// first Start, labelled, never removed by Stop).
	DockerVolume
)

func (m VolumeMode) String() string {
	switch m {
	case BindMount:
		return "bind"
	case DockerVolume:
		return "volume"
	}
	return fmt.Sprintf("VolumeMode(%d)", int(m))
}

// Errors.
var (
	// ErrEngineUnreachable: the Docker engine did not answer (daemon down,
	// wrong DOCKER_HOST). Retryable.
	// It matches provider.ErrUnreachable.
	ErrEngineUnreachable = provider.NewUnreachable("docker: engine unreachable")
	// ErrStartTimeout: the container did not run (or turn healthy) in time.
	ErrStartTimeout = errors.New("docker: container did not become ready in time")
	// ErrExited: the container exited or turned unhealthy while starting.
	ErrExited = errors.New("docker: container stopped while starting")
)

// Config configures a Provider. Zero values are the documented defaults.
type Config struct {
	// Client is the engine client; nil = client.New(client.FromEnv) with
	// API version negotiation (DOCKER_HOST, or the local socket).
	Client *client.Client
	// Host overrides DOCKER_HOST when Client is nil ("unix:///…", "tcp://…").
	Host string
	// Image is the default image when Spec.Image is empty. Required unless
	// every Spec names one.
	Image string
	// MountPath is where the volume appears inside the container; zero =
	// "/home/coder" (the seed's mount point).
	MountPath string
	// Volumes selects bind mount (zero) or Docker volume.
	Volumes VolumeMode
	// NetworkMode is the container's network ("none", "bridge", a network
	// the caller created: every workspace on it reaches the others). Zero
	// = a network per owner (OwnerNetworkName), created at the owner's
	// first Start and removed when the owner's last container is: one
	// owner's containers do not reach another's (the engine's isolation
	// between bridge networks), and the server, on the host, reaches each
	// at its address there (the proxy's Endpoint).
	NetworkMode string
	// NetworkEgress makes the owner networks ordinary bridges, with a
	// route out through the host (NAT). Zero: they are "internal": no
	// route beyond the network, so a workspace reaches only the owner's
	// other workspaces and the host's address on that network.
	NetworkEgress bool
	// User runs the container's process as "uid:gid" (or a name of the
	// image's); zero = the image's USER if it is not root, else
	// NobodyUser (the workspace's volume handed to it) when the server
	// runs as root, or the server's own uid:gid when not.
	User string
	// CapAdd are the capabilities a workspace keeps (e.g. "CHOWN",
	// "SETUID"); every other one is dropped. Zero = none.
	CapAdd []string
	// CPUs, Memory (bytes) and Pids bound every workspace container (zero:
	// no limit). A container killed for memory shows OOMKilled in its
	// exit status.
	CPUs   float64
	Memory int64
	Pids   int64
	// StartupTimeout bounds Start from create to running; zero = 300s.
	StartupTimeout time.Duration
	// HealthTimeout bounds the wait for a HEALTHCHECK to report healthy
	// once running (images without one skip it); zero = 30s.
	HealthTimeout time.Duration
	// PollInterval is how often Start re-inspects a starting container;
	// zero = 100ms.
	PollInterval time.Duration
	// Logger; nil = discard.
	Logger *slog.Logger
	// Clock times the wait for a container to run and turn healthy; nil =
	// the real clock. (The overall bound on Start is a context deadline.)
	Clock clock.Clock
}

func (c *Config) validate() error {
	if c.CPUs < 0 || c.Memory < 0 || c.Pids < 0 {
		return fmt.Errorf("docker: limits must not be negative (cpus %g, memory %d, pids %d)", c.CPUs, c.Memory, c.Pids)
	}
	if c.MountPath == "" {
		c.MountPath = "/home/coder"
	}
	if !strings.HasPrefix(c.MountPath, "/") {
		return fmt.Errorf("docker: Config.MountPath %q: want an absolute path", c.MountPath)
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = 300 * time.Second
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 30 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.StartupTimeout < 0 || c.HealthTimeout < 0 || c.PollInterval < 0 {
		return errors.New("docker: Config timeouts must not be negative")
	}
	if c.Volumes != BindMount && c.Volumes != DockerVolume {
		return fmt.Errorf("docker: Config.Volumes %v: want BindMount or DockerVolume", c.Volumes)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// Provider is a provider.Container on a Docker engine. Safe for concurrent
// use; calls for one id are expected not to overlap (the reconciler's
// contract), but overlapping Starts still converge on one container.
type Provider struct {
	cfg  Config
	cli  *client.Client
	owns bool // cli was created here and is closed by Close

	locks provider.IDLocks // per id, so a Start and a Stop do not interleave
}

var _ provider.Container = (*Provider)(nil)

// New returns a Provider. It does not contact the engine: a Docker engine
// that is down makes each call fail with ErrEngineUnreachable instead.
func New(cfg Config) (*Provider, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, cli: cfg.Client}
	if p.cli == nil {
		opts := []client.Opt{client.FromEnv}
		if cfg.Host != "" {
			opts = append(opts, client.WithHost(cfg.Host))
		}
		cli, err := client.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("docker: client: %w", err)
		}
		p.cli, p.owns = cli, true
	}
	return p, nil
}

// Close releases the client if New created it.
func (p *Provider) Close() error {
	if p.owns {
		return p.cli.Close()
	}
	return nil
}

// ContainerName is the container's name for workspace id.
func ContainerName(id string) string { return "ws-" + id }

// VolumeName is the Docker volume's name for workspace id (DockerVolume mode).
func VolumeName(id string) string { return "ws-" + id + "-home" }

func (p *Provider) lock(id string) func() { return p.locks.Lock(id) }

// wrap turns engine errors into ones that name the reason.
func (p *Provider) wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) || isDialError(err) {
		return fmt.Errorf("%w: %s workspace %s: %v", ErrEngineUnreachable, op, id, err)
	}
	return fmt.Errorf("docker: %s workspace %s: %w", op, id, err)
}

func isDialError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connect: no such file or directory") ||
		strings.Contains(s, "connect: connection refused") ||
		strings.Contains(s, "Cannot connect to the Docker daemon")
}

// Start creates and starts the workspace's container and returns once it
// runs (and, if the image has a HEALTHCHECK, once it is healthy). A running
// container is left alone; a stopped or exited one is removed and created
// again, since containers hold no data (the volume does).
func (p *Provider) Start(ctx context.Context, spec provider.Spec) error {
	image, err := p.checkSpec(spec)
	if err != nil {
		return err
	}
	defer p.lock(spec.ID)()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartupTimeout+p.cfg.HealthTimeout)
	defer cancel()

	running, err := p.clearStale(ctx, spec.ID)
	if err != nil {
		return err
	}
	if running != "" {
		return p.waitReady(ctx, spec.ID, running, p.cfg.Clock.Now())
	}
	started := p.cfg.Clock.Now()
	cid, err := p.createAndStart(ctx, spec, image)
	if err != nil {
		return err
	}
	p.cfg.Logger.Info("docker: container started", "workspace", spec.ID, "container", cid[:12], "image", image)
	if err := p.waitReady(ctx, spec.ID, cid, started); err != nil || !spec.HTTP {
		return err
	}
	return provider.WaitServing(ctx, spec.ID, func(ctx context.Context) (string, error) { return p.Endpoint(ctx, spec.ID) },
		func(ctx context.Context) error {
			in, err := p.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
			if err != nil || in.Container.State == nil || in.Container.State.Running {
				return nil
			}
			st := in.Container.State
			finished, _ := time.Parse(time.RFC3339Nano, st.FinishedAt)
			return fmt.Errorf("%w: workspace %s: %w", ErrExited, spec.ID, &provider.ExitError{Exit: *p.exit(ctx, spec.ID, st, finished)})
		})
}

// ErrNoImage: a workspace that names no image, on a provider without a
// default one (Config.Image, `ws serve --docker-image`). CheckSpec returns
// it, and Start as a permanent failure (reason NoImage): no retry can
// supply one.
var ErrNoImage = errors.New("docker: the workspace names no image and the server has no default one: " +
	"give it one (gantry ws create --image IMAGE, or ws update --image IMAGE) or start the server with a default (gantry ws serve --docker-image IMAGE)")

var _ provider.SpecChecker = (*Provider)(nil)

// CheckSpec refuses a spec Start could never run: one without an image
// when the provider has no default one. The API calls it at create and
// update, so such a workspace is refused there instead of failing at start.
func (p *Provider) CheckSpec(s provider.Spec) error {
	if s.Image == "" && p.cfg.Image == "" {
		return ErrNoImage
	}
	return nil
}

// checkSpec checks what Start needs of spec and returns the image to run.
func (p *Provider) checkSpec(spec provider.Spec) (image string, err error) {
	if spec.ID == "" {
		return "", errors.New("docker: Spec.ID is empty")
	}
	image = spec.Image
	if image == "" {
		image = p.cfg.Image
	}
	if image == "" {
		return "", provider.Permanent("NoImage", fmt.Errorf("workspace %s: %w", spec.ID, ErrNoImage))
	}
	if p.cfg.Volumes == BindMount && spec.VolumeDir == "" {
		return "", fmt.Errorf("docker: workspace %s: Spec.VolumeDir is empty (bind mount needs a host directory)", spec.ID)
	}
	return image, nil
}

// clearStale looks at the container named for workspace id: if it runs,
// clearStale returns its ID; if it exists but does not run, it is removed.
// A container of that name without the workspace's label is left alone and
// an error.
func (p *Provider) clearStale(ctx context.Context, id string) (running string, err error) {
	name := ContainerName(id)
	in, err := p.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", nil
		}
		return "", p.wrap("inspect", id, err)
	}
	if in.Container.Config != nil && in.Container.Config.Labels[LabelWorkspaceID] != id {
		return "", fmt.Errorf("docker: container %s exists but is not labelled %s=%s; refusing to touch it", name, LabelWorkspaceID, id)
	}
	if in.Container.State != nil && in.Container.State.Running {
		return in.Container.ID, nil
	}
	if _, err := p.cli.ContainerRemove(ctx, in.Container.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return "", p.wrap("remove stale container of", id, err)
	}
	return "", nil
}

// createAndStart creates and starts the workspace's container, holding
// its owner's lock so the owner's network is not removed meanwhile.
func (p *Provider) createAndStart(ctx context.Context, spec provider.Spec, image string) (string, error) {
	defer p.lockOwner(spec.Owner)()
	cid, err := p.create(ctx, spec, image)
	if err != nil {
		return "", err
	}
	if _, err := p.cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		return "", p.wrap("start", spec.ID, err)
	}
	return cid, nil
}

// create creates the workspace's container (and its Docker volume in
// DockerVolume mode) and returns the container's ID.
func (p *Provider) create(ctx context.Context, spec provider.Spec, image string) (string, error) {
	labels := map[string]string{LabelWorkspaceID: spec.ID, LabelOwner: ownerKey(spec.Owner)}
	if spec.Name != "" {
		labels["gantry.workspace-name"] = spec.Name
	}
	hc, err := p.hostConfig(ctx, spec, labels)
	if err != nil {
		return "", err
	}
	user, hand := p.user(ctx, image)
	cc := &container.Config{
		Image:  image,
		Labels: labels,
		Env: append([]string{"HOME=" + p.cfg.MountPath, "GANTRY_WORKSPACE_ID=" + spec.ID, "PORT=" + strconv.Itoa(ContainerPort)},
			spec.Env...),
		WorkingDir: p.cfg.MountPath,
		User:       user,
	}
	if spec.Command != "" {
		cc.Cmd = []string{"sh", "-c", spec.Command}
	}
	name := ContainerName(spec.ID)
	created, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cc, HostConfig: hc})
	if err == nil && hand {
		err = p.handVolume(ctx, specVolume{spec.ID, spec.VolumeDir})
	}
	if err == nil {
		return created.ID, nil
	}
	if !cerrdefs.IsConflict(err) {
		return "", p.wrap("create", spec.ID, err)
	}
	// Another replica created it between our inspect and create (the
	// reconciler's claim should prevent this); converge on it.
	in, ierr := p.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if ierr != nil {
		return "", p.wrap("inspect after conflict", spec.ID, ierr)
	}
	return in.Container.ID, nil
}

// hostConfig is the container's host side: no restarts, the network (the
// owner's, made here if absent), no capabilities but Config.CapAdd,
// no-new-privileges, and the volume mount, its only one (creating the
// Docker volume in DockerVolume mode).
func (p *Provider) hostConfig(ctx context.Context, spec provider.Spec, labels map[string]string) (*container.HostConfig, error) {
	hc := &container.HostConfig{
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		NetworkMode:   container.NetworkMode(p.cfg.NetworkMode),
		Resources:     p.resources(spec.Limits),
		CapDrop:       []string{"ALL"},
		CapAdd:        p.capabilities(),
		SecurityOpt:   []string{"no-new-privileges:true"},
	}
	if p.cfg.NetworkMode == "" {
		nid, err := p.ownerNetwork(ctx, spec.Owner)
		if err != nil {
			return nil, err
		}
		hc.NetworkMode = container.NetworkMode(nid)
	}
	switch p.cfg.Volumes {
	case BindMount:
		hc.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: spec.VolumeDir, Target: p.cfg.MountPath}}
	case DockerVolume:
		if _, err := p.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: VolumeName(spec.ID), Labels: labels}); err != nil {
			return nil, p.wrap("create volume of", spec.ID, err)
		}
		hc.Mounts = []mount.Mount{{Type: mount.TypeVolume, Source: VolumeName(spec.ID), Target: p.cfg.MountPath}}
	}
	return hc, nil
}

// resources are the workspace's limits (the configured ones where it sets
// none) as the engine takes them.
func (p *Provider) resources(l provider.Limits) container.Resources {
	if l.CPUs == 0 {
		l.CPUs = p.cfg.CPUs
	}
	if l.Memory == 0 {
		l.Memory = p.cfg.Memory
	}
	if l.Pids == 0 {
		l.Pids = p.cfg.Pids
	}
	r := container.Resources{NanoCPUs: int64(l.CPUs * 1e9), Memory: l.Memory}
	if l.Memory > 0 {
		r.MemorySwap = l.Memory // no swap beyond the limit: past it, the kernel kills
	}
	if l.Pids > 0 {
		r.PidsLimit = &l.Pids
	}
	return r
}

// waitReady polls until the container runs and, if it has a health check,
// reports healthy.
func (p *Provider) waitReady(ctx context.Context, id, cid string, started time.Time) error {
	clk := p.cfg.Clock
	t := clk.NewTicker(p.cfg.PollInterval)
	defer t.Stop()
	var runningSince time.Time
	for {
		in, err := p.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: workspace %s: %v", ErrStartTimeout, id, ctx.Err())
			}
			return p.wrap("inspect", id, err)
		}
		if done, err := p.ready(id, in.Container.State, &runningSince); done {
			if st := in.Container.State; errors.Is(err, ErrExited) && st != nil && !st.Running {
				// Say how it ended: the exit code and its last output.
				finished, _ := time.Parse(time.RFC3339Nano, st.FinishedAt)
				return fmt.Errorf("%w: %w", err, &provider.ExitError{Exit: *p.exit(ctx, id, st, finished)})
			}
			return err
		}
		if runningSince.IsZero() && clk.Since(started) > p.cfg.StartupTimeout {
			return fmt.Errorf("%w: workspace %s: not running after %v", ErrStartTimeout, id, p.cfg.StartupTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: workspace %s: %v", ErrStartTimeout, id, ctx.Err())
		case <-t.C():
		}
	}
}

// ready judges one inspection of a starting container: done is true when
// the wait is over, with err nil if the container is ready. runningSince is
// when the container was first seen running, set here.
func (p *Provider) ready(id string, st *container.State, runningSince *time.Time) (done bool, err error) {
	switch {
	case st == nil:
	case st.Running && healthy(st.Health):
		return true, nil
	case st.Running && st.Health != nil && st.Health.Status == container.Unhealthy:
		return true, fmt.Errorf("%w: workspace %s: health check reports unhealthy", ErrExited, id)
	case st.Running:
		if runningSince.IsZero() {
			*runningSince = p.cfg.Clock.Now()
		}
		if p.cfg.Clock.Since(*runningSince) > p.cfg.HealthTimeout {
			return true, fmt.Errorf("%w: workspace %s: not healthy after %v", ErrStartTimeout, id, p.cfg.HealthTimeout)
		}
	case st.Status == container.StateExited || st.Status == container.StateDead:
		return true, fmt.Errorf("%w: workspace %s: exit code %d %s", ErrExited, id, st.ExitCode, st.Error)
	}
	return false, nil
}

// healthy reports whether a running container's health lets Start return:
// no health check, or one that reports healthy.
func healthy(h *container.Health) bool {
	return h == nil || h.Status == container.NoHealthcheck || h.Status == container.Healthy
}

// Stop removes the workspace's containers (SIGKILL to every process in
// them, exec'd ones included) and keeps the volume, then the owner's
// network if no container uses it any more. Missing containers are not
// an error.
func (p *Provider) Stop(ctx context.Context, id string) error {
	defer p.lock(id)()
	ids, err := p.list(ctx, id)
	if err != nil {
		return p.wrap("list", id, err)
	}
	owners := map[string]bool{}
	for _, c := range ids {
		if _, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return p.wrap("remove", id, err)
		}
		if o, ok := c.Labels[LabelOwner]; ok {
			owners[o] = true
		}
		p.networkOwners(ctx, c, owners) // a claimed pool member's label says @pool, its network its owner's
	}
	if p.cfg.NetworkMode != "" {
		return nil
	}
	for o := range owners {
		if o == "-" {
			o = ""
		}
		unlock := p.lockOwner(o)
		err := p.dropOwnerNetworks(ctx, o)
		unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Observe reports Running when a labelled container of the workspace runs,
// Stopped when one exists, Missing otherwise.
func (p *Provider) Observe(ctx context.Context, id string) (provider.ContainerState, error) {
	cs, err := p.list(ctx, id)
	if err != nil {
		return provider.Missing, p.wrap("observe", id, err)
	}
	state := provider.Missing
	for _, c := range cs {
		if c.State == container.StateRunning {
			return provider.Running, nil
		}
		state = provider.Stopped
	}
	return state, nil
}

// networkOwners adds to owners the owner keys of the owner networks c is
// on.
func (p *Provider) networkOwners(ctx context.Context, c container.Summary, owners map[string]bool) {
	if c.NetworkSettings == nil {
		return
	}
	for name := range c.NetworkSettings.Networks {
		if !strings.HasPrefix(name, "gantry-owner-") {
			continue
		}
		if in, err := p.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{}); err == nil {
			if o, ok := in.Network.Labels[LabelOwner]; ok {
				owners[o] = true
			}
		}
	}
}

func (p *Provider) list(ctx context.Context, id string) ([]container.Summary, error) {
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: client.Filters{}.Add("label", LabelWorkspaceID+"="+id),
	})
	if err != nil {
		return nil, err
	}
	return res.Items, nil
}

// VolumeExists reports whether the Docker volume of id exists (DockerVolume
// mode; in BindMount mode the Storage owns the directory).
func (p *Provider) VolumeExists(ctx context.Context, id string) (bool, error) {
	_, err := p.cli.VolumeInspect(ctx, VolumeName(id), client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, p.wrap("inspect volume of", id, err)
	}
	return true, nil
}

// DeleteVolume removes the Docker volume of id; no-op if absent.
func (p *Provider) DeleteVolume(ctx context.Context, id string) error {
	_, err := p.cli.VolumeRemove(ctx, VolumeName(id), client.VolumeRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return p.wrap("remove volume of", id, err)
	}
	return nil
}

// Ping checks the engine and returns the negotiated API version.
func (p *Provider) Ping(ctx context.Context) (string, error) {
	res, err := p.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return "", p.wrap("ping for", "-", err)
	}
	_ = res
	return p.cli.ClientVersion(), nil
}
