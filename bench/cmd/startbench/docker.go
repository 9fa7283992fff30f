package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// imagePrograms are the host's programs the Docker image holds, with
// their shared libraries (as ldd lists them): sh runs the workspace's
// command, sleep is the command, true is what the bench execs.
var imagePrograms = []string{"/bin/sh", "/usr/bin/sleep", "/usr/bin/true"}

// buildImage builds a FROM-scratch image of imagePrograms and an
// /etc/passwd naming the users a workspace runs as (no registry is
// needed: the classic builder, nothing pulled).
func (b *bench) buildImage(ctx context.Context) (string, error) {
	if _, err := dockerCLI(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		return "", fmt.Errorf("--provider docker needs a Docker engine: %w", err)
	}
	dir := filepath.Join(b.dir, "image")
	root := filepath.Join(dir, "root")
	files, err := imageFiles(ctx)
	if err != nil {
		return "", err
	}
	for p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		if err := writeFile(filepath.Join(root, p), data, 0o755); err != nil {
			return "", err
		}
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"
	if err := writeFile(filepath.Join(root, "etc", "passwd"), []byte(passwd), 0o644); err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(root, "etc", "group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644); err != nil {
		return "", err
	}
	df := "FROM scratch\nCOPY root/ /\nENV PATH=/usr/local/bin:/usr/bin:/bin\n"
	if err := writeFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", err
	}
	tag := "gantry-startbench:" + b.runID
	t0 := time.Now()
	if _, err := dockerCLI(ctx, "build", "-q", "--label", "gantry.bench=startbench", "-t", tag, dir); err != nil {
		return "", err
	}
	log.Printf("docker image %s built in %v (sh, sleep, true from the host)", tag, time.Since(t0).Round(time.Millisecond))
	return tag, nil
}

// imageFiles are imagePrograms (a symbolic link as the file it names) and
// the shared libraries and loader ldd lists for them.
func imageFiles(ctx context.Context) (map[string]bool, error) {
	files := map[string]bool{}
	for _, p := range imagePrograms {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		files[real], files[p] = true, true
		out, err := exec.CommandContext(ctx, "ldd", real).Output()
		if err != nil {
			continue // static ("not a dynamic executable", exit 1)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				files[f[2]] = true
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"): // the dynamic loader
				files[f[0]] = true
			}
		}
	}
	return files, nil
}

// dockerCLI runs the docker CLI and returns its stdout; stderr is in the
// error.
func dockerCLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0") // the classic builder needs nothing from a registry
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, mode)
}
