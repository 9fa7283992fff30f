// Package client is the Go client of the workspace API (what `gantry ws …`
// uses): a bearer token, an optional CA (NewHTTPClient), typed errors
// (APIError, ExecError).
//
// Tour:
//
//	client.go  Client: create, list, get, desired state, update, archives,
//	           restore, fork, recover, delete, touch, accounts, audit, logs
//	templates.go  templates: create, update (a new version), list, get,
//	           versions, delete
//	exec.go    Client.Exec: a command in a workspace over api's frames
//	           (pipes, or a terminal with resizes); ExecIO
//	ssh.go     Client.SSH: an SSH connection into a workspace (an upgraded
//	           HTTP connection)
package client
