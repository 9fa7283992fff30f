#!/usr/bin/env bash
# Builds gantry-ws-demo:latest, a FROM-scratch workspace image holding one
# static Go binary that sleeps until stopped (no registry needed). Usage:
#   scripts/ws-demo-image.sh [TAG]
set -euo pipefail
tag="${1:-gantry-ws-demo:latest}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cat >"$dir/main.go" <<'GO'
package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	home := os.Getenv("HOME")
	os.WriteFile(filepath.Join(home, ".last-start"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644)
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
GO
(cd "$dir" && CGO_ENABLED=0 GO111MODULE=off go build -o ws main.go)
printf 'FROM scratch\nCOPY ws /ws\nENTRYPOINT ["/ws"]\n' >"$dir/Dockerfile"
docker build -q -t "$tag" --label gantry.demo=1 "$dir" >/dev/null
echo "$tag"
