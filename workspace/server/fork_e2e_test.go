package server_test

import (
	"strings"
	"testing"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// treeDigest lists every file and link of the working directory with its
// content's sha256 (a link: its target), sorted.
const treeDigest = `find . \( -type f -o -type l \) | LC_ALL=C sort | while read -r p; do
  if [ -L "$p" ]; then echo "$p -> $(readlink "$p")"; else echo "$p $(sha256sum < "$p")"; fi; done`

// ws fork on a real server (process provider): a RUNNING workspace is
// refused; a stopped one's files are copied exactly (a digest of the
// tree), and later writes to either are invisible to the other; an
// archived one forks from its archive, a running one from --archive latest.
// A template made --from a workspace starts its workspaces with a copy of
// its files.
func TestForkCopiesFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	s := wstest.StartServe(t, "", t.TempDir())
	run := func(id string, script string) string {
		t.Helper()
		return strings.TrimSpace(s.CLI("exec", id, "--", "sh", "-c", script))
	}
	up := func(id string) {
		t.Helper()
		s.CLI("up", id)
		s.CLI("wait", id, "RUNNING", "--timeout", "60s")
	}
	src := strings.TrimSpace(s.CLI("create", "src", "--desired", "RUNNING", "--cmd", "exec sleep infinity"))
	s.CLI("wait", src, "RUNNING", "--timeout", "60s")
	run(src, `mkdir -p d/e && head -c 3000000 /dev/urandom > d/blob && echo hi > a.txt && ln -s a.txt link && : > d/e/empty`)
	want := run(src, treeDigest)
	if !strings.Contains(want, "./d/blob ") || !strings.Contains(want, "./link -> a.txt") {
		t.Fatalf("the source's tree:\n%s", want)
	}
	if out, err := s.CLIErr("fork", src, "busy"); err == nil || !strings.Contains(out, "stop it") {
		t.Fatalf("fork of a RUNNING workspace: %v\n%s; want a refusal", err, out)
	}

	s.CLI("down", src)
	s.CLI("wait", src, "STANDBY", "--timeout", "60s")
	f1 := strings.TrimSpace(s.CLI("fork", src, "f1", "--desired", "RUNNING"))
	s.CLI("wait", f1, "RUNNING", "--timeout", "60s")
	if got := run(f1, treeDigest); got != want {
		t.Fatalf("the fork's tree differs:\n%s\nwant:\n%s", got, want)
	}
	s.CLI("template", "create", "seeded", "--from", src)
	t1 := strings.TrimSpace(s.CLI("create", "t1", "--template", "seeded", "--desired", "RUNNING"))
	s.CLI("wait", t1, "RUNNING", "--timeout", "60s")
	if got := run(t1, treeDigest); got != want {
		t.Fatalf("the workspace made from a template --from src differs:\n%s\nwant:\n%s", got, want)
	}
	run(t1, `echo t1 > only-t1`)

	up(src)
	run(src, `echo src > only-src && echo changed > a.txt`)
	run(f1, `echo f1 > only-f1`)
	if got := run(f1, `cat a.txt; ls`); strings.Contains(got, "only-src") || !strings.HasPrefix(got, "hi\n") {
		t.Fatalf("the fork sees the source's later writes:\n%s", got)
	}
	if got := run(src, `ls`); strings.Contains(got, "only-f1") || strings.Contains(got, "only-t1") {
		t.Fatalf("the source sees the fork's writes:\n%s", got)
	}
	want = run(src, treeDigest)

	s.CLI("archive", src)
	s.CLI("wait", src, "PENDING", "--timeout", "60s")
	f2 := strings.TrimSpace(s.CLI("fork", src, "f2", "--desired", "RUNNING"))
	s.CLI("wait", f2, "RUNNING", "--timeout", "60s")
	if got := run(f2, treeDigest); got != want {
		t.Fatalf("the fork of the archived workspace differs:\n%s\nwant:\n%s", got, want)
	}

	up(src)
	run(src, `echo later > later.txt`)
	f3 := strings.TrimSpace(s.CLI("fork", src, "f3", "--archive", "latest", "--desired", "RUNNING"))
	s.CLI("wait", f3, "RUNNING", "--timeout", "60s")
	if got := run(f3, treeDigest); got != want {
		t.Fatalf("the fork from --archive latest differs from that archive:\n%s\nwant:\n%s", got, want)
	}
	if w := s.Get(f3); w.DesiredState != workspace.Running || w.Owner != workspace.AdminOwner {
		t.Fatalf("f3: %+v", w)
	}
}
