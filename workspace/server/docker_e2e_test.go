package server_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantryhq/gantry/workspace"
	"github.com/gantryhq/gantry/workspace/provider/docker"
	"github.com/gantryhq/gantry/workspace/wstest"
)

// dockerProgram is the only binary of the Docker tests' image (FROM
// scratch), also as /bin/sh: run as sh (the workspace's command, sh -c
// CMD) it accepts connections on :8080 whatever CMD says; for ws exec it writes a file, prints a
// digest of the working tree, or dials an address.
const dockerProgram = `package main

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) < 2 || filepath.Base(os.Args[0]) == "sh" {
		l, err := net.Listen("tcp", ":8080")
		for err == nil {
			c, aerr := l.Accept()
			if aerr == nil {
				c.Close()
			}
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	switch os.Args[1] {
	case "write":
		os.MkdirAll(filepath.Dir(os.Args[2]), 0o755)
		if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	case "digest":
		filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				fmt.Printf("%s %x\n", p, sha256.Sum256(b))
			}
			return nil
		})
	case "dial":
		c, err := net.DialTimeout("tcp", os.Args[2], 2*time.Second)
		if err != nil {
			fmt.Println("unreachable")
			os.Exit(1)
		}
		c.Close()
		fmt.Println("reachable")
	}
}
`

// buildDockerImage builds the FROM-scratch image of dockerProgram and
// returns its tag; it is removed when t ends.
func buildDockerImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(dockerProgram), 0o644)
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY ws /ws\nCOPY ws /bin/sh\nENTRYPOINT [\"/ws\"]\n"), 0o644)
	build := exec.Command("go", "build", "-o", "ws", "main.go")
	build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v\n%s", err, out)
	}
	b := make([]byte, 6)
	rand.Read(b)
	tag := "gantry-test-server:" + hex.EncodeToString(b)
	if out, err := exec.CommandContext(t.Context(), "docker", "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// On `ws serve --provider docker`: a fork's files equal its source's at
// the fork (a digest of the tree, read inside each container), later
// writes to either are invisible to the other; a warm pool's member is
// claimed RUNNING, runs its command, and moves to its new owner's network
// (off the pool members' one): the owner's other workspace reaches it,
// another owner's does not.
func TestForkAndPoolOnDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("Docker test")
	}
	image := buildDockerImage(t)
	s := wstest.StartServe(t, "", t.TempDir(), "--provider", "docker", "--docker-image", image)
	tag := image[strings.Index(image, ":")+1:]
	aliceName, bobName := "alice-"+tag, "bob-"+tag // owner networks are per owner name: none shared with another test
	t.Cleanup(func() { removeDockerWorkspaces(t, s, aliceName, bobName) })
	run := func(id string, argv ...string) string {
		t.Helper()
		return strings.TrimSpace(s.CLI(append([]string{"exec", id, "--", "/ws"}, argv...)...))
	}
	src := strings.TrimSpace(s.CLI("create", "src", "--desired", "RUNNING"))
	s.CLI("wait", src, "RUNNING", "--timeout", "120s")
	run(src, "write", "a.txt", "hello")
	run(src, "write", "d/e/b.txt", strings.Repeat("x", 100000))
	want := run(src, "digest")
	if !strings.Contains(want, "d/e/b.txt ") {
		t.Fatalf("the source's tree:\n%s", want)
	}
	s.CLI("down", src)
	s.CLI("wait", src, "STANDBY", "--timeout", "120s")
	fork := strings.TrimSpace(s.CLI("fork", src, "copy", "--desired", "RUNNING"))
	s.CLI("wait", fork, "RUNNING", "--timeout", "120s")
	if got := run(fork, "digest"); got != want {
		t.Fatalf("the fork's tree:\n%s\nwant:\n%s", got, want)
	}
	s.CLI("up", src)
	s.CLI("wait", src, "RUNNING", "--timeout", "120s")
	run(src, "write", "a.txt", "changed")
	run(fork, "write", "only-fork", "f")
	if got := run(fork, "digest"); strings.Contains(got, "only-src") || !strings.Contains(got, want[:strings.Index(want, "\n")]) {
		t.Fatalf("the fork sees the source's later write:\n%s", got)
	}
	if got := run(src, "digest"); strings.Contains(got, "only-fork") {
		t.Fatalf("the source sees the fork's write:\n%s", got)
	}

	s.CLI("template", "create", "box", "--image", image)
	s.CLI("template", "pool", "box", "2", "--wait", "--timeout", "120s")
	alice := strings.TrimSpace(s.CLI("token", "create", "--owner", aliceName))
	bob := strings.TrimSpace(s.CLI("token", "create", "--owner", bobName))
	as := func(token string, args ...string) (string, error) {
		out, err := exec.Command(s.Bin, append([]string{"ws", "--server", s.URL, "--token", token}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := as(alice, "create", "warm", "--template", "box", "--desired", "RUNNING", "--json")
	if err != nil || !createdJSON(t, out).Pooled {
		t.Fatalf("alice's claim: %v\n%s", err, out)
	}
	warm := createdJSON(t, out)
	if got, err := as(alice, "exec", warm.ID, "--", "/ws", "write", "x", "y"); err != nil {
		t.Fatalf("exec in the claimed container: %v\n%s", err, got)
	}
	wstest.WaitFor(t, 30*time.Second, "the claimed container on alice's network alone", func() (bool, string) {
		nets := containerNetworks(t, warm.ID)
		return len(nets) == 1 && nets[0] == docker.OwnerNetworkName(aliceName), fmt.Sprint(nets)
	})
	ip := containerIP(t, warm.ID)
	if c, err := net.DialTimeout("tcp", ip+":8080", 5*time.Second); err != nil {
		t.Fatalf("the claimed container's port from the host: %v", err)
	} else {
		c.Close()
	}
	var members []workspace.Workspace
	if err := json.Unmarshal([]byte(s.CLI("list", "--json", "--pool")), &members); err != nil || len(members) < 2 {
		t.Fatalf("pool members: %d, %v", len(members), err)
	}
	s.CLI("wait", members[1].ID, "RUNNING", "--timeout", "120s")
	if got, err := s.CLIErr("exec", members[0].ID, "--", "/ws", "dial", containerIP(t, members[1].ID)+":8080"); err == nil || !strings.Contains(got, "unreachable") {
		t.Fatalf("one pool member dialing another: %v\n%s; want unreachable (their network lets no container reach another)", err, got)
	}
	b := strings.TrimSpace(mustOK(t)(as(bob, "create", "b", "--desired", "RUNNING")))
	a2 := strings.TrimSpace(mustOK(t)(as(alice, "create", "a2", "--desired", "RUNNING")))
	s.CLI("wait", b, "RUNNING", "--timeout", "120s")
	s.CLI("wait", a2, "RUNNING", "--timeout", "120s")
	if got, err := as(bob, "exec", b, "--", "/ws", "dial", ip+":8080"); err == nil || !strings.Contains(got, "unreachable") {
		t.Fatalf("bob's workspace dialing alice's claimed one (%s): %v\n%s; want unreachable", ip, err, got)
	}
	if got, err := as(alice, "exec", a2, "--", "/ws", "dial", ip+":8080"); err != nil || !strings.Contains(got, "reachable") {
		t.Fatalf("alice's other workspace dialing her claimed one (%s): %v\n%s; want reachable (one owner, one network)", ip, err, got)
	}
}

func mustOK(t *testing.T) func(string, error) string {
	return func(out string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
}

// containerNetworks names the networks workspace id's container is on.
func containerNetworks(t *testing.T, id string) []string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{range $n, $v := .NetworkSettings.Networks}}{{$n}} {{end}}", "ws-"+id).Output()
	if err != nil {
		t.Fatalf("docker inspect ws-%s: %v", id, err)
	}
	return strings.Fields(string(out))
}

// containerIP is the address of workspace id's container on its network.
func containerIP(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", "ws-"+id).Output()
	ip := strings.TrimSpace(string(out))
	if err != nil || ip == "" || strings.Contains(ip, " ") {
		t.Fatalf("the address of ws-%s: %q, %v; want one", id, ip, err)
	}
	return ip
}

// removeDockerWorkspaces stops s and removes the containers, volumes and
// networks of its workspaces and of owners (they outlive their server by
// design).
func removeDockerWorkspaces(t *testing.T, s *wstest.Serve, owners ...string) {
	var all []workspace.Workspace
	for _, args := range [][]string{{"list", "--json"}, {"list", "--json", "--pool"}} {
		var some []workspace.Workspace
		out, err := s.CLIErr(args...)
		if err == nil {
			err = json.Unmarshal([]byte(out), &some)
		}
		if err != nil {
			t.Logf("cleanup: ws %v: %v\n%s", args, err, out)
		}
		all = append(all, some...)
	}
	s.Stop(syscall.SIGTERM)          // or its reconciler starts them again
	owners = append(owners, "@pool") // the pool members' network (a claimed container keeps its label)
	for _, w := range all {
		if out, err := exec.Command("docker", "rm", "-f", "ws-"+w.ID).CombinedOutput(); err != nil {
			t.Logf("cleanup: %v: %s", err, out)
		}
		exec.Command("docker", "volume", "rm", "-f", "ws-"+w.ID).Run()
		owners = append(owners, w.Owner)
	}
	for _, o := range owners {
		out, _ := exec.Command("docker", "network", "ls", "-q", "--filter", "label=gantry.owner="+o).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command("docker", append([]string{"network", "rm"}, ids...)...).Run()
		}
	}
}
