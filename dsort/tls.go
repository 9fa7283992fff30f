package dsort

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// This file is the job's transport security: mutual TLS when the three
// files are given, each side checking the other's certificate against the
// job's CA (the token stays the job's identity: it rides inside the TLS
// connection), and a warning when plaintext leaves the machine.
// `gantry sort certs` (certs.go) makes the CA and the certificates.

// TLSFiles names the PEM files of a job's mutual TLS. All three or none.
type TLSFiles struct {
	Cert string // this process's certificate (server and client)
	Key  string // its private key
	CA   string // the CA that signs every certificate of the job
}

// Enabled reports whether any file is set (then all must be).
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// creds is how a process dials the job's other processes: the token every
// call carries and, with TLS, the client side's credentials.
type creds struct {
	token string
	tls   credentials.TransportCredentials // nil: plaintext
}

func (c creds) transport() credentials.TransportCredentials {
	if c.tls == nil {
		return insecure.NewCredentials()
	}
	return c.tls
}

// security is a process's loaded TLS: the credentials it dials with and
// the ones it serves with (nil, nil without TLS).
type security struct {
	client credentials.TransportCredentials
	server credentials.TransportCredentials
}

// loadTLS reads and checks the files: the key matches the certificate and
// the CA signed it, so a wrong file fails at start with its name, not at
// the first handshake. Refused handshakes are logged to logger.
func loadTLS(f TLSFiles, logger *slog.Logger) (security, error) {
	if !f.Enabled() {
		return security{}, nil
	}
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return security{}, errorf(ErrConfig, "dsort: TLS needs a certificate, its key and the CA (--tls-cert, --tls-key, --tls-ca): got cert %q, key %q, ca %q", f.Cert, f.Key, f.CA)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return security{}, errorf(ErrConfig, "dsort: TLS certificate %s with key %s: %v", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return security{}, errorf(ErrConfig, "dsort: TLS CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return security{}, errorf(ErrConfig, "dsort: TLS CA %s holds no PEM certificate", f.CA)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return security{}, errorf(ErrConfig, "dsort: TLS certificate %s: %v", f.Cert, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return security{}, errorf(ErrConfig, "dsort: TLS certificate %s is not a client certificate of the CA %s: %v", f.Cert, f.CA, err)
	}
	// Full-size records from the first byte: the shuffle is bulk data, and
	// small records (for a quick first byte after idle) only cost more
	// seals and copies.
	client := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, RootCAs: pool,
		DynamicRecordSizingDisabled: true}
	server := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, DynamicRecordSizingDisabled: true}
	return security{client: newTLSCreds(client, nil), server: newTLSCreds(server, logger)}, nil
}

// plaintextWarning warns once per process that a job's traffic (records
// and token) crosses the network in clear: plaintext to or on an address
// that is not loopback.
var plaintextWarning sync.Once

func warnPlaintext(logger *slog.Logger, tlsOn bool, addrs ...string) {
	if tlsOn || logger == nil {
		return
	}
	for _, a := range addrs {
		if ip := net.ParseIP(hostOf(a)); ip != nil && !ip.IsLoopback() {
			plaintextWarning.Do(func() {
				logger.Warn("plaintext gRPC on a non-loopback address: records and the token cross the network in clear; use --tls-cert, --tls-key and --tls-ca (gantry sort certs makes them)", "addr", a)
			})
			return
		}
	}
}

// handshakeRefused reports whether a call failed because a certificate
// was refused, as the dialing side sees it: gRPC folds the handshake's
// error (ours, or the other side's alert) into an Unavailable status's
// text. Retrying cannot help: the certificates have to change. A handshake
// cut short (EOF, a reset: a master restarting) is not one of these.
func handshakeRefused(msg string) bool {
	for _, m := range []string{"x509:", "tls: failed to verify", "remote error: tls:", "does not look like a TLS handshake"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
