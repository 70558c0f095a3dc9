package zkgate_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	zkgate "github.com/zkgate/zkgate/clients/go"
)

// writePKI writes a CA (ca.pem), a server certificate for localhost and 127.0.0.1
// (server.pem, server.key) and a client certificate (client.pem, client.key) into dir.
func writePKI(t *testing.T, dir string) {
	t.Helper()
	write := func(name, kind string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "zkgate-go-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	write("ca.pem", "CERTIFICATE", caDER)
	for i, who := range []string{"server", "client"} {
		k := key()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: who},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		pkcs8, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(who+".pem", "CERTIFICATE", der)
		write(who+".key", "PRIVATE KEY", pkcs8)
	}
}

// startTLSGateway runs `zkgate serve` with TLS and client certificates on the test's ZooKeeper
// (ZKGATE_BIN, ZKGATE_ZK, ZKGATE_ROOT) and returns its port. It dies with the test process.
func startTLSGateway(t *testing.T, dir string) string {
	t.Helper()
	bin, zk, root := os.Getenv("ZKGATE_BIN"), os.Getenv("ZKGATE_ZK"), os.Getenv("ZKGATE_ROOT")
	if bin == "" || zk == "" || root == "" {
		t.Skip("ZKGATE_BIN, ZKGATE_ZK and ZKGATE_ROOT not set: run through tests/go_client.rs")
	}
	cmd := exec.Command(bin, "serve", "--log-json", "--zk", zk, "--root", root,
		"--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--session-timeout", sessionTimeout(t).String(),
		"--zk-tick-time", "250ms",
		"--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server.key"),
		"--tls-client-ca", filepath.Join(dir, "ca.pem"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZKGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	port := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(logs)
		for lines.Scan() {
			line := lines.Text()
			if i := strings.Index(line, `"grpc":"Some(`); i >= 0 && strings.Contains(line, "zkgate serving") {
				addr := line[i+len(`"grpc":"Some(`):]
				if j := strings.Index(addr, ")"); j > 0 {
					if _, p, err := net.SplitHostPort(addr[:j]); err == nil {
						port <- p
					}
				}
			}
		}
	}()
	select {
	case p := <-port:
		return p
	case <-time.After(wait):
		t.Fatal("the TLS gateway did not log its address")
	}
	panic("unreachable")
}

func TestTLSAndMutualTLS(t *testing.T) {
	gateway(t, "")
	dir := t.TempDir()
	writePKI(t, dir)
	port := startTLSGateway(t, dir)
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	ctx := context.Background()
	name := uniqueName(t)

	tlsClient := func(endpoint string, opts ...zkgate.Option) *zkgate.Client {
		c, err := zkgate.New(append([]zkgate.Option{zkgate.WithEndpoints(endpoint), zkgate.WithCallTimeout(2 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	good := tlsClient("https://localhost:"+port, zkgate.WithCA(ca), zkgate.WithClientCert(cert, key))
	waitFor(t, "the TLS gateway serving", func() bool { _, err := good.Leader(ctx, name); return errors.Is(err, zkgate.ErrNoLeader) })
	l, err := good.Campaign(ctx, name, "tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A bare host:port is TLS once a TLS option is given; the server name can be overridden.
	byIP := tlsClient("127.0.0.1:"+port, zkgate.WithCA(ca), zkgate.WithClientCert(cert, key), zkgate.WithServerName("localhost"))
	if got, err := byIP.Leader(ctx, name); err != nil || got.FencingToken != l.FencingToken() {
		t.Fatalf("Leader over TLS with a server-name override: %+v %v", got, err)
	}
	_ = l.Resign(ctx)

	for what, c := range map[string]*zkgate.Client{
		"without a client certificate": tlsClient("https://localhost:"+port, zkgate.WithCA(ca)),
		"with the wrong server name":   tlsClient("https://localhost:"+port, zkgate.WithCA(ca), zkgate.WithClientCert(cert, key), zkgate.WithServerName("elsewhere.example")),
		"without the CA":               tlsClient("https://localhost:"+port, zkgate.WithClientCert(cert, key)),
		"in plaintext":                 tlsClient("http://localhost:" + port),
	} {
		_, err := c.Leader(ctx, name)
		if err == nil || errors.Is(err, zkgate.ErrNoLeader) {
			t.Errorf("a call %s got through: %v", what, err)
		}
		t.Logf("a call %s: %v", what, err)
	}
}
