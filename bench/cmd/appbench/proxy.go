package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
)

// runProxy is `appbench proxy BASE ID`: what `gantry ws ssh --stdio ID`
// does (an HTTP/1.1 Upgrade: ssh of /v1/workspaces/ID/ssh with
// $GANTRY_TOKEN, then the connection over stdin and stdout), in a small
// program, to tell the gantry binary's start from the rest of a cold ssh.
func runProxy(base, id string) {
	req, err := http.NewRequest(http.MethodGet, base+"/v1/workspaces/"+url.PathEscape(id)+"/ssh", nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "ssh")
	req.Header.Set("Authorization", "Bearer "+os.Getenv("GANTRY_TOKEN"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		log.Fatalf("ssh upgrade: %s", resp.Status)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		log.Fatalf("ssh upgrade: the body is a %T", resp.Body)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(conn, os.Stdin); done <- struct{}{} }()
	go func() { io.Copy(os.Stdout, conn); done <- struct{}{} }()
	<-done
}

// lightProxy is ssh's option for runProxy as the ProxyCommand.
func (e *env) lightProxy() []string {
	return []string{"-o", fmt.Sprintf("ProxyCommand=%s proxy %s %s", e.dir+"/appbench", e.base, e.id)}
}
