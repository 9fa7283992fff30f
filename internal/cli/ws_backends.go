package cli

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider/archive"
	"github.com/gantryhq/gantry/workspace/provider/docker"
	"github.com/gantryhq/gantry/workspace/provider/s3"
)

// wsBackendFlags selects the real backends of `gantry ws serve` (issue 13):
// --provider docker and --storage s3://bucket?endpoint=…
type wsBackendFlags struct {
	storage     string
	dockerImage string
}

func (b *wsBackendFlags) register(f *pflag.FlagSet) {
	f.StringVar(&b.storage, "storage", "fs", "archive storage: fs (under --data) or s3://bucket[/prefix]?endpoint=http://host:port[&create=true] (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
	f.StringVar(&b.dockerImage, "docker-image", "", "default image for --provider docker when a workspace names none")
}

// apply sets cfg.Storage for --storage s3://… (volumes stay directories
// under --data) and cfg.Container for --provider docker (bind-mounting
// those volume directories). The process and fs defaults are untouched.
func (b *wsBackendFlags) apply(ctx context.Context, cfg *workspace.ServerConfig, prov string, log *slog.Logger) error {
	data := cfg.Data
	if data == "" {
		data = "gantry-ws-data"
	}
	// Docker bind mounts need absolute host paths.
	abs, err := filepath.Abs(data)
	if err != nil {
		return err
	}
	switch {
	case b.storage == "" || b.storage == "fs":
		if prov == "docker" {
			cfg.Data = abs
		}
	case strings.HasPrefix(b.storage, "s3://"):
		sc, err := s3.ParseURL(b.storage)
		if err != nil {
			return fmt.Errorf("--storage: %w", err)
		}
		sc.Logger = log
		blobs, err := s3.New(ctx, sc)
		if err != nil {
			return fmt.Errorf("--storage: %w", err)
		}
		cfg.Storage = &archive.Storage{Root: filepath.Join(abs, "volumes"), Blobs: blobs}
	default:
		return fmt.Errorf("--storage %q: want fs or s3://bucket?endpoint=http://host:port", b.storage)
	}
	if prov != "docker" {
		return nil
	}
	c, err := docker.New(docker.Config{Image: b.dockerImage, Logger: log})
	if err != nil {
		return fmt.Errorf("--provider docker: %w", err)
	}
	cfg.Container = c
	return nil
}
