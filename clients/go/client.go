// Package zkgate is the Go client of zkgate, a gRPC coordination gateway over ZooKeeper: leader
// election and locks for services that do not link a ZooKeeper client.
//
// It follows the shape of etcd's clientv3/concurrency package: [Client.Campaign] blocks until
// elected and returns a [Leadership]; [Client.Lock] and [Client.TryLock] return a [Lock]. Both
// holds expose Done() (closed when the hold is lost or given up), Err() and FencingToken(). The
// helper keeps the watchdog the gateway's API asks for: a hold is lost, and its stream cancelled
// (so the gateway deletes the znode and the next in line takes over), when the gateway sends
// `suspended`, when the stream ends, or when nothing at all arrives for the gateway's
// silence_limit while holding (a frozen or cut-off gateway).
//
// A [Client] talks to a fleet of gateways (endpoints, default from ZKGATE_ENDPOINT) and fails
// over between them with jittered backoff, as clients/CONFORMANCE.md prescribes for every zkgate
// client. [Client.RunWhileLeader] and [Client.RunWhileHolding] run a function exactly while a
// hold lasts and campaign again after a loss (auto-requeue); [Client.Observe] follows an
// election's leader across gateway failures.
//
// The generated gRPC stubs are in the zkgatev1 subpackage.
package zkgate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// Defaults shared with every zkgate client (clients/CONFORMANCE.md).
const (
	// EndpointEnv names the environment variable read when no endpoint is given in code: a
	// comma-separated list of endpoints.
	EndpointEnv = "ZKGATE_ENDPOINT"
	// TokenEnv names the environment variable holding the bearer token, read when no token is
	// given in code (WithToken, WithTokenFile).
	TokenEnv = "ZKGATE_TOKEN"
	// DefaultEndpoint is used when neither code nor ZKGATE_ENDPOINT names one.
	DefaultEndpoint = "http://127.0.0.1:50051"
	// DefaultCallTimeout bounds each attempt of a unary call.
	DefaultCallTimeout = 5 * time.Second
	// DefaultBackoffBase and DefaultBackoffMax shape the pause before trying again after a
	// failure: full jitter over base·2ⁿ, capped.
	DefaultBackoffBase = 50 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
)

// Option configures a [Client].
type Option func(*config)

type config struct {
	endpoints   []string
	caFile      string
	certFile    string
	keyFile     string
	serverName  string
	tlsConfig   *tls.Config
	callTimeout time.Duration
	backoffBase time.Duration
	backoffMax  time.Duration
	dialOptions []grpc.DialOption
	logf        func(format string, args ...any)
	token       string
	tokenFile   string
}

// WithEndpoints sets the gateway fleet, tried in this order. Each argument may itself be a
// comma-separated list. An endpoint is host:port, http://host:port (plaintext) or
// https://host:port (TLS); a bare host:port uses TLS only when a TLS option is given.
func WithEndpoints(endpoints ...string) Option {
	return func(c *config) { c.endpoints = append(c.endpoints, splitList(strings.Join(endpoints, ","))...) }
}

// WithCA verifies gateways against the PEM CA bundle in file instead of the system roots.
func WithCA(file string) Option { return func(c *config) { c.caFile = file } }

// WithClientCert presents this PEM certificate and key to the gateways (mTLS).
func WithClientCert(certFile, keyFile string) Option {
	return func(c *config) { c.certFile, c.keyFile = certFile, keyFile }
}

// WithServerName verifies the gateways' certificates against this name instead of the
// endpoint's host.
func WithServerName(name string) Option { return func(c *config) { c.serverName = name } }

// WithTLSConfig uses cfg (cloned) as the base TLS configuration; WithCA, WithClientCert and
// WithServerName still apply on top.
func WithTLSConfig(cfg *tls.Config) Option { return func(c *config) { c.tlsConfig = cfg } }

// WithCallTimeout sets the deadline of each unary call attempt (default 5 s).
func WithCallTimeout(d time.Duration) Option { return func(c *config) { c.callTimeout = d } }

// WithBackoff sets the failover backoff: full jitter over base·2ⁿ, capped at max
// (default 50 ms and 2 s).
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) { c.backoffBase, c.backoffMax = base, max }
}

// WithDialOptions adds gRPC dial options (interceptors, a custom dialer, …).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// WithToken sends `authorization: Bearer <token>` with every call and stream, on every
// endpoint (so also after a failover): a gateway with --auth-policy identifies the caller by
// it. Without WithToken or WithTokenFile the client uses ZKGATE_TOKEN when it is set. Never put
// a token on a command line.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithTokenFile reads the bearer token from file (its content, trimmed) when the client is
// made.
func WithTokenFile(file string) Option { return func(c *config) { c.tokenFile = file } }

// bearer is the per-call credential carrying the token. It is allowed on plaintext endpoints
// too (tests, a trusted network); use https:// endpoints anywhere a token could be overheard.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// resolveToken picks the token: WithToken, else WithTokenFile, else ZKGATE_TOKEN, else none.
func resolveToken(cfg *config) (string, error) {
	if t := strings.TrimSpace(cfg.token); t != "" {
		return t, nil
	}
	if cfg.tokenFile != "" {
		b, err := os.ReadFile(cfg.tokenFile)
		if err != nil {
			return "", fmt.Errorf("zkgate: token file: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("zkgate: token file %s: the file is empty", cfg.tokenFile)
		}
		return t, nil
	}
	return strings.TrimSpace(os.Getenv(TokenEnv)), nil
}

// WithLogger receives the client's few log lines (failovers, losses); default: none.
func WithLogger(logf func(format string, args ...any)) Option {
	return func(c *config) { c.logf = logf }
}

// Client is a connection to a fleet of zkgate gateways. It is safe for concurrent use; one per
// process is enough. Connections are made lazily, one per endpoint.
type Client struct {
	cfg       config
	endpoints []*endpoint

	mu     sync.Mutex
	cursor int
	closed bool
}

type endpoint struct {
	name   string // as configured, for reports
	target string // host:port
	tls    bool
	conn   *grpc.ClientConn
}

// New makes a Client. Without WithEndpoints it reads ZKGATE_ENDPOINT, else uses
// http://127.0.0.1:50051. It fails only on a malformed endpoint or unreadable TLS files; it
// does not wait for any gateway.
func New(opts ...Option) (*Client, error) {
	cfg := config{
		callTimeout: DefaultCallTimeout,
		backoffBase: DefaultBackoffBase,
		backoffMax:  DefaultBackoffMax,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if len(cfg.endpoints) == 0 {
		cfg.endpoints = splitList(os.Getenv(EndpointEnv))
	}
	if len(cfg.endpoints) == 0 {
		cfg.endpoints = []string{DefaultEndpoint}
	}
	token, err := resolveToken(&cfg)
	if err != nil {
		return nil, err
	}
	cfg.token = token
	tlsWanted := cfg.caFile != "" || cfg.certFile != "" || cfg.tlsConfig != nil
	c := &Client{cfg: cfg}
	for _, raw := range cfg.endpoints {
		ep, err := parseEndpoint(raw, tlsWanted)
		if err != nil {
			return nil, err
		}
		c.endpoints = append(c.endpoints, ep)
	}
	if cfg.certFile != "" || cfg.keyFile != "" {
		if cfg.certFile == "" || cfg.keyFile == "" {
			return nil, errors.New("zkgate: a client certificate needs both the certificate and the key")
		}
	}
	// Read the TLS files now so that a bad path fails here, not on the first call.
	for _, ep := range c.endpoints {
		if ep.tls {
			if _, err := c.tlsCredentials(); err != nil {
				return nil, err
			}
			break
		}
	}
	return c, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseEndpoint(raw string, tlsWanted bool) (*endpoint, error) {
	ep := &endpoint{name: raw, tls: tlsWanted}
	rest := raw
	switch {
	case strings.HasPrefix(raw, "http://"):
		rest, ep.tls = strings.TrimPrefix(raw, "http://"), false
	case strings.HasPrefix(raw, "https://"):
		rest, ep.tls = strings.TrimPrefix(raw, "https://"), true
	case strings.Contains(raw, "://"):
		return nil, fmt.Errorf("zkgate: endpoint %q: only http:// and https:// are understood", raw)
	}
	rest = strings.TrimSuffix(rest, "/")
	if _, port, err := net.SplitHostPort(rest); err != nil || port == "" {
		return nil, fmt.Errorf("zkgate: endpoint %q is not host:port", raw)
	}
	ep.target = rest
	return ep, nil
}

func (c *Client) tlsCredentials() (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.cfg.tlsConfig != nil {
		cfg = c.cfg.tlsConfig.Clone()
	}
	if c.cfg.caFile != "" {
		pem, err := os.ReadFile(c.cfg.caFile)
		if err != nil {
			return nil, fmt.Errorf("zkgate: reading the CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("zkgate: no PEM certificate in %s", c.cfg.caFile)
		}
		cfg.RootCAs = pool
	}
	if c.cfg.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.cfg.certFile, c.cfg.keyFile)
		if err != nil {
			return nil, fmt.Errorf("zkgate: reading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if c.cfg.serverName != "" {
		cfg.ServerName = c.cfg.serverName
	}
	return credentials.NewTLS(cfg), nil
}

// Endpoints lists the configured gateways, in the order they are tried.
func (c *Client) Endpoints() []string {
	out := make([]string, len(c.endpoints))
	for i, ep := range c.endpoints {
		out[i] = ep.name
	}
	return out
}

// Close closes every connection. Open holds end (their gateways delete the znodes).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var first error
	for _, ep := range c.endpoints {
		if ep.conn != nil {
			if err := ep.conn.Close(); err != nil && first == nil {
				first = err
			}
			ep.conn = nil
		}
	}
	return first
}

// current is the endpoint new calls start on: the first, until a failure moves everyone on.
func (c *Client) current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursor
}

// advance moves the shared cursor past endpoint `from` (round robin), unless another call
// already moved it; returns the new current endpoint.
func (c *Client) advance(from int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cursor == from {
		c.cursor = (from + 1) % len(c.endpoints)
		if len(c.endpoints) > 1 {
			c.logf("zkgate: moving from %s to %s", c.endpoints[from].name, c.endpoints[c.cursor].name)
		}
	}
	return c.cursor
}

func (c *Client) logf(format string, args ...any) {
	if c.cfg.logf != nil {
		c.cfg.logf(format, args...)
	}
}

// conn returns endpoint i's connection, dialling it (without waiting) on first use.
func (c *Client) conn(i int) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("zkgate: client closed")
	}
	ep := c.endpoints[i]
	if ep.conn != nil {
		return ep.conn, nil
	}
	opts := []grpc.DialOption{
		// Reconnect at the pace of our own failover, not gRPC's default of up to 2 minutes,
		// and give up a handshake that a frozen gateway never answers.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  c.cfg.backoffBase,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   c.cfg.backoffMax,
			},
			MinConnectTimeout: 2 * time.Second,
		}),
		// Pings on busy connections find a dead or frozen gateway under a queued stream or an
		// Observe, which get no heartbeats (a holder's watchdog is much faster).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
	if ep.tls {
		creds, err := c.tlsCredentials()
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(creds))
	} else {
		opts = append(opts, grpc.WithInsecure()) //nolint:staticcheck // insecure.NewCredentials is newer than Debian's grpc 1.33
	}
	if c.cfg.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(c.cfg.token)))
	}
	opts = append(opts, c.cfg.dialOptions...)
	conn, err := grpc.Dial(ep.target, opts...)
	if err != nil {
		return nil, fmt.Errorf("zkgate: %s: %w", ep.name, err)
	}
	ep.conn = conn
	return conn, nil
}

// ByLeaseExtra is how much longer than the call timeout ResignLease and ReleaseLease may take:
// the gateway answers once the holder has been told and its znode is gone, which for a holder
// that does not end its stream is its silence_limit plus the gateway's keepalive timeout plus
// a second (8.5 s with the gateway's defaults).
const ByLeaseExtra = 10 * time.Second

// unary runs call on the current endpoint with the call deadline; on UNAVAILABLE (or an
// attempt that timed out while ctx did not) it moves to the next endpoint, with backoff, until
// every endpoint was tried once.
func (c *Client) unary(ctx context.Context, call func(ctx context.Context, conn *grpc.ClientConn) error) error {
	return c.unaryWithin(ctx, c.cfg.callTimeout, call)
}

// unaryWithin is unary with a deadline of its own per attempt.
func (c *Client) unaryWithin(ctx context.Context, timeout time.Duration, call func(ctx context.Context, conn *grpc.ClientConn) error) error {
	b := c.newBackoff()
	var err error
	for attempt := 0; attempt < len(c.endpoints); attempt++ {
		if attempt > 0 {
			if werr := b.wait(ctx); werr != nil {
				return err
			}
		}
		i := c.current()
		conn, cerr := c.conn(i)
		if cerr != nil {
			return cerr
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		err = call(actx, conn)
		attemptTimedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !(status.Code(err) == codes.Unavailable || attemptTimedOut) {
			return err
		}
		c.advance(i)
	}
	return err
}

// backoffState is full-jitter exponential backoff: wait a uniform random time in
// [0, min(max, base·2ⁿ)].
type backoffState struct {
	base, max time.Duration
	n         int
}

func (c *Client) newBackoff() *backoffState {
	return &backoffState{base: c.cfg.backoffBase, max: c.cfg.backoffMax}
}

func (b *backoffState) reset() { b.n = 0 }

func (b *backoffState) next() time.Duration {
	d := b.base
	for i := 0; i < b.n && d < b.max; i++ {
		d *= 2
	}
	if d > b.max {
		d = b.max
	}
	b.n++
	return time.Duration(jitter.int63n(int64(d) + 1))
}

func (b *backoffState) wait(ctx context.Context) error {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter is a locked random source (math/rand's global one is not seeded before Go 1.20).
var jitter = &lockedRand{r: rand.New(rand.NewSource(time.Now().UnixNano()))}

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) int63n(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int63n(n)
}
