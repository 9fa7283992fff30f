package kubernetes

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gantryhq/gantry/workspace/provider"
	"github.com/gantryhq/gantry/workspace/provider/archive"
)

// ExitPermanent is a job Pod's exit status for a failure that retrying
// cannot fix (a checksum mismatch, a missing archive); its termination
// message is "Reason: message".
const ExitPermanent = 3

// VolumeJob is what an archive or restore Pod runs: `gantry ws volume pack`
// packs Dir into the archive Key; `unpack` fills Dir from it. Storage is the
// archive storage's URL (--storage).
type VolumeJob struct {
	Op      string // "pack" or "unpack"
	Dir     string
	Key     string
	Storage string
}

// ParseVolumeJob parses `pack|unpack --storage URL --key K --dir D`.
func ParseVolumeJob(args []string) (VolumeJob, error) {
	var j VolumeJob
	if len(args) == 0 || args[0] != "pack" && args[0] != "unpack" {
		return j, errors.New("ws volume: want pack or unpack, then --storage URL --key KEY --dir DIR")
	}
	j.Op = args[0]
	fs := flag.NewFlagSet("ws volume "+j.Op, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&j.Storage, "storage", "", "archive storage URL")
	fs.StringVar(&j.Key, "key", "", "archive key")
	fs.StringVar(&j.Dir, "dir", "", "the volume's directory")
	if err := fs.Parse(args[1:]); err != nil {
		return j, fmt.Errorf("ws volume %s: %w", j.Op, err)
	}
	if j.Storage == "" || j.Key == "" || j.Dir == "" || fs.NArg() != 0 {
		return j, fmt.Errorf("ws volume %s: want --storage URL --key KEY --dir DIR and nothing else", j.Op)
	}
	return j, nil
}

// Run does the job against bs (the archive storage Storage names). Both
// ways are idempotent: pack writes nothing when the archive is committed;
// unpack does nothing when Dir exists, since it renames a fully verified
// copy into place.
func (j VolumeJob) Run(ctx context.Context, bs provider.BlobStore) error {
	switch j.Op {
	case "pack":
		if err := os.MkdirAll(j.Dir, 0o755); err != nil { // a volume nothing wrote to yet
			return err
		}
		_, err := archive.Write(ctx, bs, j.Key, j.Dir)
		return err
	case "unpack":
		if _, err := os.Stat(j.Dir); err == nil {
			return nil
		}
		return archive.Extract(ctx, bs, j.Key, filepath.Join(filepath.Dir(j.Dir), ".staging"), j.Dir)
	}
	return fmt.Errorf("ws volume: unknown op %q", j.Op)
}

// ExitStatus is the job's exit status for err and the termination message
// the provider reads back: ExitPermanent and "Reason: message" for a
// permanent failure, 1 otherwise.
func ExitStatus(err error) (int, string) {
	var pe *provider.PermanentError
	if errors.As(err, &pe) {
		return ExitPermanent, pe.Reason + ": " + pe.Err.Error()
	}
	return 1, err.Error()
}
