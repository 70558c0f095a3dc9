package zkgate

// Tests without a gateway: endpoint parsing, the endpoint list's and the token's sources, the
// cursor and the backoff.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		raw, target         string
		tls, tlsWanted, bad bool
	}{
		{raw: "127.0.0.1:50051", target: "127.0.0.1:50051"},
		{raw: "127.0.0.1:50051", target: "127.0.0.1:50051", tls: true, tlsWanted: true},
		{raw: "http://gw:1", target: "gw:1"},
		{raw: "http://gw:1/", target: "gw:1", tlsWanted: true},
		{raw: "https://gw:443", target: "gw:443", tls: true},
		{raw: "[::1]:50051", target: "[::1]:50051"},
		{raw: "gw", bad: true},
		{raw: "http://gw", bad: true},
		{raw: "grpc://gw:1", bad: true},
	} {
		ep, err := parseEndpoint(tc.raw, tc.tlsWanted)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: accepted", tc.raw)
			}
			continue
		}
		if err != nil || ep.target != tc.target || ep.tls != tc.tls || ep.name != tc.raw {
			t.Errorf("%q (tls wanted %v): %+v %v", tc.raw, tc.tlsWanted, ep, err)
		}
	}
}

func TestEndpointsFromOptionsEnvOrDefault(t *testing.T) {
	t.Setenv(EndpointEnv, "http://a:1, http://b:2,,")
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); len(got) != 2 || got[0] != "http://a:1" || got[1] != "http://b:2" {
		t.Fatalf("from %s: %v", EndpointEnv, got)
	}
	c, err = New(WithEndpoints("x:1,y:2", "z:3"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); len(got) != 3 || got[2] != "z:3" {
		t.Fatalf("from options: %v", got)
	}
	t.Setenv(EndpointEnv, "")
	c, err = New()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); len(got) != 1 || got[0] != DefaultEndpoint {
		t.Fatalf("default: %v", got)
	}
	if _, err := New(WithEndpoints("nope")); err == nil {
		t.Fatal("a malformed endpoint was accepted")
	}
	if _, err := New(WithEndpoints("https://a:1"), WithCA("/nonexistent/ca.pem")); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	if _, err := New(WithClientCert("cert.pem", "")); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}

func TestTokenFromOptionsFileOrEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, " from-env\n")
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithToken("from-code"), WithTokenFile(file)}, "from-code"},
		{[]Option{WithTokenFile(file)}, "from-file"},
		{nil, "from-env"},
	} {
		c, err := New(tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if c.cfg.token != tc.want {
			t.Fatalf("token %q, want %q", c.cfg.token, tc.want)
		}
	}
	if _, err := New(WithTokenFile(empty)); err == nil {
		t.Fatal("an empty token file was accepted")
	}
	if _, err := New(WithTokenFile(filepath.Join(dir, "missing"))); err == nil {
		t.Fatal("a missing token file was accepted")
	}
	t.Setenv(TokenEnv, "")
	if c, _ := New(); c.cfg.token != "" {
		t.Fatalf("no token expected, got %q", c.cfg.token)
	}
}

func TestCursorMovesRoundRobinOnce(t *testing.T) {
	c, err := New(WithEndpoints("a:1", "b:2", "c:3"))
	if err != nil {
		t.Fatal(err)
	}
	if c.current() != 0 {
		t.Fatal("does not start with the first endpoint")
	}
	if c.advance(0) != 1 || c.advance(0) != 1 {
		t.Fatal("two failures seen on endpoint 0 must move once, to 1")
	}
	if c.advance(1) != 2 || c.advance(2) != 0 {
		t.Fatal("not round robin")
	}
}

func TestBackoffIsFullJitterDoublingToTheCap(t *testing.T) {
	b := &backoffState{base: 50 * time.Millisecond, max: 2 * time.Second}
	ceilings := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
	sawBelowHalf := false
	for round := 0; round < 200; round++ {
		b.reset()
		for _, ceiling := range ceilings {
			d := b.next()
			if d < 0 || d > ceiling*time.Millisecond {
				t.Fatalf("backoff %v outside [0, %v ms]", d, ceiling)
			}
			if d < ceiling*time.Millisecond/2 {
				sawBelowHalf = true
			}
		}
	}
	if !sawBelowHalf {
		t.Fatal("no jitter")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.n = 10
	if err := b.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on a cancelled context: %v", err)
	}
}
