// Package api is the workspace HTTP API: JSON routes in one table, the
// front door every request goes through (body cap, cross-site check,
// authentication, the audit row of every change), accounts, archives, the
// proxy into a workspace's port, exec over a framed stream, and SSH. Its
// request and response bodies and the exec frame codec are exported for
// package client.
//
// Tour:
//
//	api.go       API, APIConfig, APIStore, AccountStore; the routes; create,
//	             list, get, update, desired state, recover, touch, delete
//	access.go    ServeHTTP: the front door and the audit row
//	accounts.go  whoami, tokens and audit (admin), page login and logout;
//	             Whoami, TokenRequest, TokenInfo
//	archives.go  a workspace's archives and the one its next restore uses;
//	             RestoreRequest
//	fork.go      a new workspace with a copy of another's files (ForkRequest)
//	pools.go     warm pools (PoolStore): size and read a template's pool; a
//	             create served by a ready member (claimPooled)
//	templates.go templates (TemplateStore), a create from one, moving a
//	             workspace between its versions
//	proxy.go     /w/{id}/… into the workspace's PORT (wakes it, notes TTL
//	             activity); logs
//	upstream.go  how the proxy reaches a PORT: through a PortDialer's Dial
//	             when the provider has one (workspaces in namespaces)
//	apps.go      an origin per workspace app ({name}--{owner}.{apps domain}):
//	             AppLabel, AppCookie; host routing, app sessions
//	apps_share.go  apps beyond the default one ({app}--{name}--{owner}),
//	             how a label resolves, share levels and their audit
//	apps_login.go  an app's login: /v1/apps/authorize's one-time code, the
//	             app host's /.gantry/callback that turns it into gantry_app
//	exec.go      `ws exec`: a command in the workspace, pipes or a terminal
//	ssh.go       an SSH server on an upgraded connection into a workspace:
//	             its sessions run commands through the Execer
//	ssh_forward.go  ssh -L: direct-tcpip channels to the workspace's PORT
//	             and its apps' ports
//	streams.go   the context every open stream runs in: ends with its
//	             credential (auth.Watch), notes TTL activity while open
//	frame.go     the exec stream's frames: WriteFrame, ReadFrame, Frame…
package api
