package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/gorilla/websocket"
)

// upstreamBody is what the workspace's app answers at /.
const upstreamBody = "hello from the workspace\n"

// runUpstream is the workspace's command (`appbench upstream`): an HTTP
// server on 127.0.0.1:$PORT (inside the workspace's network namespace)
// answering / with upstreamBody, /port with $PORT, and /ws with a
// WebSocket that echoes every message back as it came.
func runUpstream() {
	port := os.Getenv("PORT")
	if port == "" {
		log.Fatal("upstream: $PORT is not set")
	}
	up := websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 4096, CheckOrigin: func(*http.Request) bool { return true }}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, upstreamBody)
	})
	mux.HandleFunc("/port", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, port) })
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade answered the error
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(l, mux))
}
