package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shoalml/shoal/flags"
	"github.com/shoalml/shoal/secure"
)

// runCerts writes a test cluster's credentials (shoal certs).
func runCerts(args []string, stdout, stderr io.Writer) error {
	fs := flags.NewFlagSet("certs", "Writes a throwaway certificate authority, one certificate for every node of a test\ncluster (server and client use) and a random token into --out, for --tls-cert,\n--tls-key, --tls-ca and --auth-token-file. The CA's key is not kept.", stderr)
	out := fs.String("out", "certs", "the folder to write ca.pem, node.pem, node-key.pem and token into")
	hosts := fs.String("hosts", "", "comma-separated host names and IP addresses the nodes are reached at, besides localhost, 127.0.0.1 and ::1")
	valid := fs.Duration("valid", 30*24*time.Hour, "how long the certificates are valid")
	if err := flags.ParseArgs(fs, args, 0, "no arguments"); err != nil {
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
