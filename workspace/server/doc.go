// Package server is the one composition root of the workspace subsystem
// (`gantry ws serve`): it opens the store, makes the first admin token,
// and wires the reconciler, the singletons, the API and the hint bus over
// the providers it is given. What they share besides the store it makes
// once and gives each explicitly: the urgency.Gate (to the store, the API
// and the reconciler) and the handoff.Mailbox (to the reconciler and the
// monitor). Its errors name ServerConfig fields.
//
// Tour:
//
//	server.go    ServerConfig, Server, NewServer, Run (serve, then drain)
//	dblock.go    one server per SQLite database (a flock beside it)
//	listener.go  the API connections' timeouts (streams spared) and limits
//	             (limitListener: 503 past MaxConns or MaxConnsPerAddr)
//	security.go  the listen/TLS check and the first admin token
//	             (AdminTokenFile)
//	sshkey.go    the API's SSH host key, kept under Data (SSHHostKeyFile)
//	tenancy.go   a server whose workspaces share its user is one owner's
//	             (InsecureSharedUser); the database's files 0600
package server
