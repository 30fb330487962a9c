package flags

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/shoalml/shoal/secure"
)

// Sec are a node's TLS and token flags (README "Security").
type Sec struct {
	Files secure.Files
	Creds *secure.Credentials // from Files, once loaded
}

// Register adds the flags to fs.
func (s *Sec) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Files.Cert, "tls-cert", "", SectionSecurity.Usage("this node's TLS certificate (PEM), presented to servers and clients alike (shoal certs writes one)"))
	fs.StringVar(&s.Files.Key, "tls-key", "", SectionSecurity.Usage("the private key of --tls-cert (PEM)"))
	fs.StringVar(&s.Files.CA, "tls-ca", "", SectionSecurity.Usage("the CA that signed every node's certificate (PEM): peers are checked against it, and servers ask clients for a certificate"))
	fs.StringVar(&s.Files.Token, "auth-token-file", "", SectionSecurity.Usage("a file holding the job's token: servers refuse calls without it (Unauthenticated), clients send it (only over TLS or to loopback)"))
}

// Throwaway makes a CA, node certificate and token in a new temporary
// folder, for one run on this machine (shoal train --tls, bench
// allreduce --tls), and loads them; remove deletes the folder.
func (s *Sec) Throwaway() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "shoal-tls-")
	if err != nil {
		return nil, fmt.Errorf("--tls: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if s.Files, err = secure.WriteTestPKI(dir, nil, 24*time.Hour); err == nil {
		err = s.Load()
	}
	if err != nil {
		remove()
		return nil, fmt.Errorf("--tls: %w", err)
	}
	return remove, nil
}

// Load reads the files named (none: plaintext, no token).
func (s *Sec) Load() error {
	c, err := secure.Load(s.Files)
	s.Creds = c
	return err
}

// WarnExposed logs the secret files other users may read.
func (s *Sec) WarnExposed(log *slog.Logger) {
	for _, e := range s.Creds.Exposed() {
		log.Warn("a secret file others can read", "component", "auth", "problem", e)
	}
}

// Args are the flags that give a child the same credentials.
func (s *Sec) Args() []string {
	var a []string
	for _, f := range []struct{ name, v string }{{"--tls-cert", s.Files.Cert}, {"--tls-key", s.Files.Key}, {"--tls-ca", s.Files.CA}, {"--auth-token-file", s.Files.Token}} {
		if f.v != "" {
			a = append(a, f.name, f.v)
		}
	}
	return a
}

// CheckDial refuses, before any work, servers the token would reach in
// the clear.
func (s *Sec) CheckDial(addrs []string) error {
	for _, a := range addrs {
		if err := s.Creds.CheckDial(a); err != nil {
			return err
		}
	}
	return nil
}
