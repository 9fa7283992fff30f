package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/fs"
	"github.com/gantryhq/gantry/workspace/provider/kubernetes"
	"github.com/gantryhq/gantry/workspace/provider/s3"
	"github.com/gantryhq/gantry/workspace/server"
)

// kubeFlags configure `ws serve --provider kubernetes`.
type kubeFlags struct {
	kubeconfig    string
	namespace     string
	storageClass  string
	volumeSize    string
	image         string
	jobImage      string
	archiveSecret string
	nodeSelector  map[string]string
	serverLabels  map[string]string
	serverNSLabel map[string]string
	serverCIDRs   []string
}

func (k *kubeFlags) register(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "--provider kubernetes: kubeconfig file (default $KUBECONFIG, ~/.kube/config or in-cluster)")
	f.StringVar(&k.namespace, "namespace", "default", "--provider kubernetes: namespace of the workspace pods and claims (it must exist: ws serve refuses to start otherwise)")
	f.StringVar(&k.storageClass, "storage-class", "", "--provider kubernetes: storage class of the workspace claims (default: the cluster's default class)")
	f.StringVar(&k.volumeSize, "volume-size", "1Gi", "--provider kubernetes: size each workspace claim requests")
	f.StringVar(&k.image, "image", "", "--provider kubernetes: default image when a workspace names none (without it, ws create refuses a workspace without --image)")
	f.StringVar(&k.jobImage, "job-image", "", "--provider kubernetes: image holding the gantry binary (on its PATH) for the archive and restore pods")
	f.StringToStringVar(&k.serverLabels, "server-pod-labels", nil, "--provider kubernetes: labels of the server's Pods, the only ingress each workspace's NetworkPolicy admits (k=v,…; default app.kubernetes.io/name=gantry)")
	f.StringToStringVar(&k.serverNSLabel, "server-namespace-labels", nil, "--provider kubernetes: with --server-pod-labels, the labels of the server's namespace (default: the workspaces' namespace)")
	f.StringSliceVar(&k.serverCIDRs, "server-cidr", nil, "--provider kubernetes: address blocks the server's connections to workspaces come from, admitted by their NetworkPolicies (a server outside the cluster)")
	f.StringToStringVar(&k.nodeSelector, "node-selector", nil, "--provider kubernetes: run workspaces only on nodes with these labels (k=v,…)")
	f.StringVar(&k.archiveSecret, "archive-secret", "", "--provider kubernetes: Secret whose keys become the archive and restore pods' environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY for --storage s3://…)")
}

// apply sets cfg.Container and cfg.Storage to a Kubernetes provider. The
// archive storage must be reachable from the cluster's pods, since the
// archive and restore pods stream the volumes to and from it.
func (k *kubeFlags) apply(ctx context.Context, cfg *server.ServerConfig, storage string, cpus float64, memory int64, log *slog.Logger) error {
	if !strings.HasPrefix(storage, "s3://") && !strings.HasPrefix(storage, "file://") {
		return fmt.Errorf("--provider kubernetes needs --storage s3://bucket?endpoint=… (or file:///dir where the cluster's pods share that directory): its archive and restore pods reach the archives, not the server's --data")
	}
	size, err := resource.ParseQuantity(k.volumeSize)
	if err != nil || size.Sign() <= 0 {
		return fmt.Errorf("--volume-size %q: want a positive quantity such as 10Gi", k.volumeSize)
	}
	blobs, err := openBlobs(ctx, storage, log)
	if err != nil {
		return fmt.Errorf("--storage: %w", err)
	}
	p, err := kubernetes.New(kubernetes.Config{Kubeconfig: k.kubeconfig, Namespace: k.namespace, StorageClass: k.storageClass,
		VolumeSize: size, Image: k.image, JobImage: k.jobImage, Archives: blobs, ArchiveURL: storage, ArchiveSecret: k.archiveSecret,
		NodeSelector: k.nodeSelector,
		ServerPeers:  kubernetes.ServerPeers{PodLabels: k.serverLabels, NamespaceLabels: k.serverNSLabel, CIDRs: k.serverCIDRs}, CPUs: cpus, Memory: memory, Logger: log})
	if err != nil {
		return fmt.Errorf("--provider kubernetes: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.CheckNamespace(cctx); err != nil {
		p.Close()
		return fmt.Errorf("--namespace %s: %w", k.namespace, err)
	}
	cfg.Container, cfg.Storage = p, p
	return nil
}

// openBlobs opens an archive storage URL: s3://bucket[/prefix]?endpoint=…
// or file:///dir.
func openBlobs(ctx context.Context, u string, log *slog.Logger) (provider.BlobStore, error) {
	if dir, ok := strings.CutPrefix(u, "file://"); ok {
		if !strings.HasPrefix(dir, "/") {
			return nil, fmt.Errorf("%q: want file:///absolute/dir", u)
		}
		return &fs.BlobStore{Dir: dir}, nil
	}
	sc, err := s3.ParseURL(u)
	if err != nil {
		return nil, err
	}
	sc.Logger = log
	return s3.New(ctx, sc)
}

// newWSVolumeCmd is what the Kubernetes provider's archive and restore pods
// run: pack a volume directory into an archive, or unpack one into it. A
// failure that retrying cannot fix exits 3 with "Reason: message" in the
// pod's termination message.
func newWSVolumeCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "volume pack|unpack --storage URL --key KEY --dir DIR",
		Short: "Pack a workspace volume into an archive or unpack one (run by the kubernetes provider's job pods)",
		Args:  cobra.ArbitraryArgs,
		// The provider builds these arguments; they are parsed in one place
		// (kubernetes.ParseVolumeJob), which the tests' simulated kubelet uses too.
		DisableFlagParsing: true,
		Hidden:             true,
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := kubernetes.ParseVolumeJob(args)
			if err != nil {
				return withCode(2, err)
			}
			bs, err := openBlobs(cmd.Context(), j.Storage, env.Logger)
			if err == nil {
				err = j.Run(cmd.Context(), bs)
			}
			if err == nil {
				return nil
			}
			code, msg := kubernetes.ExitStatus(err)
			writeTerminationLog(msg, env.Logger)
			return withCode(code, errors.New(msg))
		},
	}
}

// writeTerminationLog writes msg where Kubernetes reads a container's
// termination message, if that file exists (it is never created here).
func writeTerminationLog(msg string, log *slog.Logger) {
	f, err := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.WriteString(msg); err != nil {
		log.Debug("ws volume: termination log", "err", err)
	}
}
