package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider"
)

// LabelOwner is put on every container and owner network this package
// creates; its value is the workspace's owner ("-" for none).
const LabelOwner = "gantry.owner"

// NobodyUser is the user a workspace runs as when neither Config.User nor
// its image names a non-root one and the server runs as root.
const NobodyUser = 65534

// ownerKey is owner as a label value and network key: "-" for the empty
// owner, poolKey for every unclaimed warm-pool member (workspace.PoolOwner:
// they share one network, and a claim moves its member to its new
// owner's: Adopt).
func ownerKey(owner string) string {
	switch {
	case owner == "":
		return "-"
	case workspace.IsPoolOwner(owner):
		return poolKey
	}
	return owner
}

// poolKey is the owner key of the warm pools' unclaimed members. Their
// network does not let its containers reach each other (the bridge's
// inter-container communication off): a member just claimed, whose owner's
// code may run before Adopt has moved it, reaches no other container
// there, nor does anything there reach it.
const poolKey = "@pool"

var _ provider.Adopter = (*Provider)(nil)

// Adopt moves workspace id's container, a warm pool's member just claimed,
// from the pool members' network to owner's (made if absent): connected to
// the one, then disconnected from the other. Either step already done is
// skipped, so a retry after a crash completes it.
func (p *Provider) Adopt(ctx context.Context, id, owner string) error {
	if p.cfg.NetworkMode != "" {
		return nil // one network for every container: nothing to move
	}
	name := ContainerName(id)
	unlock := p.lockOwner(owner)
	nid, err := p.ownerNetwork(ctx, owner)
	if err == nil {
		_, err = p.cli.NetworkConnect(ctx, nid, client.NetworkConnectOptions{Container: name})
		switch {
		case err != nil && cerrdefs.IsNotFound(err):
			unlock()
			return nil // no container (stopped since): its next start joins owner's network
		case err != nil && (cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already exists")):
			err = nil // connected by an earlier try
		}
	}
	unlock()
	if err != nil {
		return p.wrap("connect to its owner's network", id, err)
	}
	pool, err := p.findOwnerNetwork(ctx, poolKey)
	if err != nil || pool == "" {
		return err
	}
	_, err = p.cli.NetworkDisconnect(ctx, pool, client.NetworkDisconnectOptions{Container: name, Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "is not connected") {
		return p.wrap("disconnect from the pool's network", id, err)
	}
	return nil
}

// OwnerNetworkName is the name of the network the workspaces of owner
// join when Config.NetworkMode is empty.
func OwnerNetworkName(owner string) string {
	sum := sha256.Sum256([]byte(ownerKey(owner)))
	return "gantry-owner-" + hex.EncodeToString(sum[:6])
}

// ownerNetwork returns the ID of owner's network, creating it if absent.
// The engine (API 1.41) does not refuse a second network of one name, so
// networks are found by label and the lowest ID wins if two replicas made
// one each. The caller holds the owner's lock.
func (p *Provider) ownerNetwork(ctx context.Context, owner string) (string, error) {
	if id, err := p.findOwnerNetwork(ctx, owner); err != nil || id != "" {
		return id, err
	}
	var opts map[string]string
	if ownerKey(owner) == poolKey {
		opts = map[string]string{"com.docker.network.bridge.enable_icc": "false"}
	}
	_, err := p.cli.NetworkCreate(ctx, OwnerNetworkName(owner), client.NetworkCreateOptions{
		Driver:   "bridge",
		Internal: !p.cfg.NetworkEgress,
		Labels:   map[string]string{LabelOwner: ownerKey(owner), "gantry.network": "owner"},
		Options:  opts,
	})
	if err != nil {
		return "", p.wrap("create the owner network of", ownerKey(owner), err)
	}
	p.cfg.Logger.Info("docker: owner network created", "owner", owner, "network", OwnerNetworkName(owner), "internal", !p.cfg.NetworkEgress)
	return p.findOwnerNetwork(ctx, owner)
}

func (p *Provider) findOwnerNetwork(ctx context.Context, owner string) (string, error) {
	res, err := p.cli.NetworkList(ctx, client.NetworkListOptions{
		Filters: client.Filters{}.Add("label", LabelOwner+"="+ownerKey(owner)).Add("name", OwnerNetworkName(owner)),
	})
	if err != nil {
		return "", p.wrap("list the owner networks of", ownerKey(owner), err)
	}
	var ids []string
	for _, n := range res.Items {
		if n.Name == OwnerNetworkName(owner) {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) == 0 {
		return "", nil
	}
	return slices.Min(ids), nil
}

// dropOwnerNetworks removes owner's networks that no container uses any
// more. The caller holds the owner's lock.
func (p *Provider) dropOwnerNetworks(ctx context.Context, owner string) error {
	res, err := p.cli.NetworkList(ctx, client.NetworkListOptions{
		Filters: client.Filters{}.Add("label", LabelOwner+"="+ownerKey(owner)).Add("name", OwnerNetworkName(owner)),
	})
	if err != nil {
		return p.wrap("list the owner networks of", ownerKey(owner), err)
	}
	for _, n := range res.Items {
		in, err := p.cli.NetworkInspect(ctx, n.ID, client.NetworkInspectOptions{})
		if err != nil || len(in.Network.Containers) > 0 {
			continue // gone already, or still in use
		}
		if _, err := p.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) &&
			!strings.Contains(err.Error(), "active endpoints") {
			return p.wrap("remove the owner network of", ownerKey(owner), err)
		}
		p.cfg.Logger.Info("docker: owner network removed", "owner", owner, "network", n.Name)
	}
	return nil
}

// lockOwner serialises, within this server, making a container on owner's
// network and removing that network.
func (p *Provider) lockOwner(owner string) func() {
	if p.cfg.NetworkMode != "" {
		return func() {}
	}
	return p.locks.Lock("owner-network\x00" + ownerKey(owner))
}

// user is the "uid:gid" (or name) the workspace's container runs as:
// Config.User if set; else the image's own user if it is not root; else
// NobodyUser when the server runs as root (handVolume then gives it the
// volume: hand is true), or the server's own uid and gid (whose volume it
// already is) when not.
func (p *Provider) user(ctx context.Context, image string) (user string, hand bool) {
	if p.cfg.User != "" {
		return p.cfg.User, false
	}
	if in, err := p.cli.ImageInspect(ctx, image); err == nil && in.Config != nil && !isRoot(in.Config.User) {
		return in.Config.User, false
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("%d:%d", os.Geteuid(), os.Getegid()), false
	}
	return fmt.Sprintf("%d:%d", NobodyUser, NobodyUser), true
}

// handVolume gives the workspace's volume to NobodyUser. It runs after
// the container is created: creating it gives an empty Docker volume the
// owner of the mount point in the image (root, for a path the image does
// not have).
func (p *Provider) handVolume(ctx context.Context, spec specVolume) error {
	dir, err := p.volumeDir(ctx, spec)
	if err != nil || dir == "" {
		return err
	}
	if err := chownTree(dir, NobodyUser, NobodyUser); err != nil {
		return fmt.Errorf("docker: workspace %s: hand its volume to uid %d: %w", spec.id, NobodyUser, err)
	}
	return nil
}

// specVolume is what user needs of a spec.
type specVolume struct{ id, dir string }

// volumeDir is the host directory of the workspace's volume: the bind
// mount's source, or the Docker volume's mount point when it is on this
// machine ("" when it is not).
func (p *Provider) volumeDir(ctx context.Context, spec specVolume) (string, error) {
	if p.cfg.Volumes == BindMount {
		return spec.dir, nil
	}
	in, err := p.cli.VolumeInspect(ctx, VolumeName(spec.id), client.VolumeInspectOptions{})
	if err != nil {
		return "", p.wrap("inspect volume of", spec.id, err)
	}
	if _, err := os.Stat(in.Volume.Mountpoint); err != nil {
		return "", nil
	}
	return in.Volume.Mountpoint, nil
}

// isRoot reports whether an image's USER runs as root ("" is root).
func isRoot(user string) bool {
	u, _, _ := strings.Cut(user, ":")
	return u == "" || u == "root" || u == "0"
}

// chownTree hands dir and everything under it to uid:gid, unless dir is
// already theirs (the walk is then skipped: a volume is handed over once).
// Symbolic links are changed themselves, never followed.
func chownTree(dir string, uid, gid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// capabilities are the container's added capabilities: Config.CapAdd
// (every other one is dropped).
func (p *Provider) capabilities() []string { return slices.Clone(p.cfg.CapAdd) }
