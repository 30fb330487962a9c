package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/shoalml/shoal/secure"
)

// secFlags are a node's TLS and token flags (README "Security").
type secFlags struct {
	files secure.Files
	creds *secure.Credentials // from files, once loaded
}

func (s *secFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.files.Cert, "tls-cert", "", "this node's TLS certificate (PEM), presented to servers and clients alike (shoal certs writes one)")
	fs.StringVar(&s.files.Key, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.StringVar(&s.files.CA, "tls-ca", "", "the CA that signed every node's certificate (PEM): peers are checked against it, and servers ask clients for a certificate")
	fs.StringVar(&s.files.Token, "auth-token-file", "", "a file holding the job's token: servers refuse calls without it (Unauthenticated), clients send it (only over TLS or to loopback)")
}

// throwaway makes a CA, node certificate and token in a new temporary
// folder, for one run on this machine (shoal train --tls, bench
// allreduce --tls), and loads them; remove deletes the folder.
func (s *secFlags) throwaway() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "shoal-tls-")
	if err != nil {
		return nil, fmt.Errorf("--tls: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if s.files, err = secure.WriteTestPKI(dir, nil, 24*time.Hour); err == nil {
		err = s.load()
	}
	if err != nil {
		remove()
		return nil, fmt.Errorf("--tls: %w", err)
	}
	return remove, nil
}

// load reads the files named (none: plaintext, no token).
func (s *secFlags) load() error {
	c, err := secure.Load(s.files)
	s.creds = c
	return err
}

// warnExposed logs the secret files other users may read.
func (s *secFlags) warnExposed(log *slog.Logger) {
	for _, e := range s.creds.Exposed() {
		log.Warn("a secret file others can read", "component", "auth", "problem", e)
	}
}

// args are the flags that give a child the same credentials.
func (s *secFlags) args() []string {
	var a []string
	for _, f := range []struct{ name, v string }{{"--tls-cert", s.files.Cert}, {"--tls-key", s.files.Key}, {"--tls-ca", s.files.CA}, {"--auth-token-file", s.files.Token}} {
		if f.v != "" {
			a = append(a, f.name, f.v)
		}
	}
	return a
}

// checkDial refuses, before any work, servers the token would reach in
// the clear.
func (s *secFlags) checkDial(addrs []string) error {
	for _, a := range addrs {
		if err := s.creds.CheckDial(a); err != nil {
			return err
		}
	}
	return nil
}

// runCerts writes a test cluster's credentials (shoal certs).
func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certs", "Writes a throwaway certificate authority, one certificate for every node of a test\ncluster (server and client use) and a random token into --out, for --tls-cert,\n--tls-key, --tls-ca and --auth-token-file. The CA's key is not kept.", stderr)
	out := fs.String("out", "certs", "the folder to write ca.pem, node.pem, node-key.pem and token into")
	hosts := fs.String("hosts", "", "comma-separated host names and IP addresses the nodes are reached at, besides localhost, 127.0.0.1 and ::1")
	valid := fs.Duration("valid", 30*24*time.Hour, "how long the certificates are valid")
	if err := parseArgs(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if *valid <= 0 {
		return fmt.Errorf("--valid %v: want > 0", *valid)
	}
	var hs []string
	if *hosts != "" {
		hs = strings.Split(*hosts, ",")
	}
	f, err := secure.WriteTestPKI(*out, hs, *valid)
	if err != nil {
		return fmt.Errorf("--out %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "wrote %s, %s, %s and %s; give every shoal ps, worker and health\n  --tls-cert %s --tls-key %s --tls-ca %s --auth-token-file %s\n",
		f.CA, f.Cert, f.Key, f.Token, f.Cert, f.Key, f.CA, f.Token)
	return nil
}
