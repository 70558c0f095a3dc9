package zkgate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/zkgate/zkgate/clients/go/zkgatev1"
)

// ErrLocked is what TryLock returns when the lock (or every permit) is taken.
var ErrLocked = errors.New("zkgate: lock is held")

// ErrWaitTimeout is what Lock returns when WithWaitTimeout passed before the lock was granted.
var ErrWaitTimeout = errors.New("zkgate: lock not acquired within the wait timeout")

// LockMode is exclusive (Write, the default) or shared (Read: a read-write lock on the name).
type LockMode int

const (
	Write LockMode = iota
	Read
)

// LockOption configures Lock, TryLock and RunWhileHolding.
type LockOption func(*lockConfig)

type lockConfig struct {
	owner       string
	permits     uint32
	mode        LockMode
	waitTimeout *time.Duration
	ttl         time.Duration
	run         []RunOption
}

// WithOwner names the holder (shown by Holders); default "go-HOSTNAME-PID".
func WithOwner(owner string) LockOption { return func(c *lockConfig) { c.owner = owner } }

// WithPermits makes the name a semaphore of n permits (everyone on a name must agree).
func WithPermits(n uint32) LockOption { return func(c *lockConfig) { c.permits = n } }

// WithMode chooses Write (exclusive, default) or Read (shared with other readers).
func WithMode(m LockMode) LockOption { return func(c *lockConfig) { c.mode = m } }

// WithWaitTimeout bounds the wait for the grant, enforced by the gateway (ErrWaitTimeout).
func WithWaitTimeout(d time.Duration) LockOption { return func(c *lockConfig) { c.waitTimeout = &d } }

// WithTTL makes the lease need a keep-alive within each ttl; the client sends one every ttl/3
// for as long as the lock is held, so a holder whose process stalls loses the lock.
func WithTTL(ttl time.Duration) LockOption { return func(c *lockConfig) { c.ttl = ttl } }

// WithRunOptions passes RunOptions (WithRequeue) to RunWhileHolding.
func WithRunOptions(opts ...RunOption) LockOption {
	return func(c *lockConfig) { c.run = append(c.run, opts...) }
}

func lockOptions(opts []LockOption) lockConfig {
	c := lockConfig{}
	for _, o := range opts {
		o(&c)
	}
	if c.owner == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "localhost"
		}
		c.owner = fmt.Sprintf("go-%s-%d", host, os.Getpid())
	}
	return c
}

// Lock is a held lock (or semaphore permit, or read lock), held by one open Acquire stream.
// Stop the work it protects as soon as Done is closed.
type Lock struct {
	s    *stream
	name string
}

// Done is closed when the lock is no longer held: lost (Err, Reason) or unlocked.
func (l *Lock) Done() <-chan struct{} { return l.s.done }

// Err is nil while held, a *LostError after a loss, ErrReleased after Unlock.
func (l *Lock) Err() error { return l.s.err() }

// Reason is why the lock was lost, or "".
func (l *Lock) Reason() LossReason { return l.s.reason() }

// FencingToken orders the holders of the name: a later holder has a larger token.
func (l *Lock) FencingToken() uint64 { return l.s.fencingToken() }

// SilenceLimit is how long the holder's lease lasts past the send of its newest answered ping
// (with an older gateway: past the last message heard) before it counts as lost.
func (l *Lock) SilenceLimit() time.Duration { return l.s.silenceLimit() }

// Endpoint is the gateway holding the lock, as configured.
func (l *Lock) Endpoint() string { return l.s.endpoint }

// Lease is the capability to release from any gateway (Client.ReleaseLease). Secret.
func (l *Lock) Lease() string { return l.s.getLease() }

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Unlock releases the lock: release{}, then it waits (up to the call timeout or ctx) until the
// gateway has deleted the znode, else cancels the stream, which also deletes it.
func (l *Lock) Unlock(ctx context.Context) error { return l.s.leave(ctx) }

type acquireRPC struct {
	st  pb.Lock_AcquireClient
	ttl time.Duration
}

// keepAliveInterval: a third of the ttl, so one lost or late keep-alive does not lose the lock.
func (r acquireRPC) keepAliveInterval() time.Duration {
	if r.ttl <= 0 {
		return 0
	}
	if i := r.ttl / 3; i > 0 {
		return i
	}
	return time.Millisecond
}

func (r acquireRPC) recv() (event, error) {
	m, err := r.st.Recv()
	if err != nil {
		return event{}, err
	}
	switch e := m.GetEvent().(type) {
	case *pb.AcquireResponse_Queued:
		return queuedEvent(e.Queued), nil
	case *pb.AcquireResponse_Acquired:
		return event{kind: evGranted, lease: e.Acquired.GetLease(), token: e.Acquired.GetFencingToken(),
			silence: e.Acquired.GetSilenceLimit().AsDuration(), pingSeq: e.Acquired.GetPingSeq()}, nil
	case *pb.AcquireResponse_Suspended:
		return event{kind: evSuspended, stopWithin: e.Suspended.GetStopWithin().AsDuration(),
			endRequested: e.Suspended.GetReason() == pb.SuspendReason_SUSPEND_REASON_END_REQUESTED}, nil
	case *pb.AcquireResponse_Resumed:
		return event{kind: evResumed}, nil
	case *pb.AcquireResponse_Heartbeat:
		return event{kind: evHeartbeat, seq: e.Heartbeat.GetSeq()}, nil
	}
	return event{kind: evOther}, nil
}

func (r acquireRPC) sendLeave() error {
	return r.st.Send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Release{Release: &pb.ReleaseLock{}}})
}

func (r acquireRPC) sendKeepAlive() error {
	return r.st.Send(&pb.AcquireRequest{Request: &pb.AcquireRequest_KeepAlive{KeepAlive: &pb.KeepAlive{}}})
}

func (r acquireRPC) sendPing(seq uint64) error {
	return r.st.Send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Ping{Ping: &pb.Ping{Seq: seq}}})
}

func openAcquire(name string, cfg lockConfig) func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error) {
	// The acquire is ping 1 (lease.go): openStream read its send time before.
	req := &pb.AcquireLock{Name: name, Owner: cfg.owner, Permits: cfg.permits, PingSeq: 1}
	if cfg.mode == Read {
		req.Mode = pb.LockMode_LOCK_MODE_READ
	}
	if cfg.waitTimeout != nil {
		req.WaitTimeout = durationpb.New(*cfg.waitTimeout)
	}
	if cfg.ttl > 0 {
		req.Ttl = durationpb.New(cfg.ttl)
	}
	return func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error) {
		st, err := pb.NewLockClient(conn).Acquire(ctx)
		if err != nil {
			return nil, err
		}
		if err := st.Send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Acquire{Acquire: req}}); err != nil {
			if _, rerr := st.Recv(); rerr != nil {
				return nil, rerr
			}
			return nil, err
		}
		return acquireRPC{st: st, ttl: cfg.ttl}, nil
	}
}

func (c *Client) acquire(ctx context.Context, b *backoffState, name string, cfg lockConfig) (*stream, error) {
	s, err := c.establish(ctx, b, openAcquire(name, cfg))
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded && cfg.waitTimeout != nil {
			if *cfg.waitTimeout == 0 {
				return nil, ErrLocked
			}
			return nil, ErrWaitTimeout
		}
		return nil, err
	}
	return s, nil
}

// Lock waits for the lock `name` (with WithPermits, a semaphore permit; with WithMode(Read), a
// read lock) and returns it held, failing over between gateways while it waits as Campaign
// does. Cancelling ctx after the grant does not release it: call Unlock.
//
// # Errors
//
// ErrWaitTimeout (WithWaitTimeout), ctx's error, or the gateway's status for a refused request
// (FAILED_PRECONDITION when the permits disagree, INVALID_ARGUMENT for a bad name).
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	cfg := lockOptions(opts)
	s, err := c.acquire(ctx, c.newBackoff(), name, cfg)
	if err != nil {
		return nil, err
	}
	return &Lock{s: s, name: name}, nil
}

// TryLock takes the lock only if it is free now (a zero wait timeout); ErrLocked otherwise.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.Lock(ctx, name, append(opts, WithWaitTimeout(0))...)
}

// RunWhileHolding takes the lock and runs fn while it is held: fn's context is cancelled the
// moment the lock is lost. When fn returns while the lock is held, the lock is released and
// fn's error returned. After a loss the lock is taken again (auto-requeue, on by default; turn
// it off with WithRunOptions(WithRequeue(false))), on the next endpoint when the gateway failed
// or went silent, after backoff. Returns ctx's error once ctx ends (releasing first).
func (c *Client) RunWhileHolding(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	cfg := lockOptions(opts)
	r := runOptions(cfg.run)
	return c.runWhileHolding(ctx, r.requeue,
		func(ctx context.Context, b *backoffState) (*stream, error) { return c.acquire(ctx, b, name, cfg) },
		func(ctx context.Context, s *stream) error { return fn(ctx, &Lock{s: s, name: name}) })
}

// ReleaseLease releases the lock that holds lease, from any gateway. Idempotent: a spent lease
// is NOT_FOUND.
func (c *Client) ReleaseLease(ctx context.Context, lease string) error {
	return c.unaryWithin(ctx, c.cfg.callTimeout+ByLeaseExtra, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := pb.NewLockClient(conn).Release(ctx, &pb.ReleaseRequest{Lease: lease})
		return err
	})
}

// Holder is one holder of a lock.
type Holder struct {
	Owner        string
	FencingToken uint64
	Since        time.Time
	Mode         LockMode
}

// Holders lists who holds the lock (all pages) and how many wait.
func (c *Client) Holders(ctx context.Context, name string) (holders []Holder, waiting uint32, err error) {
	token := ""
	for {
		var resp *pb.HoldersResponse
		err = c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			resp, err = pb.NewLockClient(conn).Holders(ctx, &pb.HoldersRequest{Name: name, PageToken: token})
			return err
		})
		if err != nil {
			return nil, 0, err
		}
		for _, h := range resp.GetHolders() {
			m := Write
			if h.GetMode() == pb.LockMode_LOCK_MODE_READ {
				m = Read
			}
			holders = append(holders, Holder{Owner: h.GetOwner(), FencingToken: h.GetFencingToken(), Since: h.GetSince().AsTime(), Mode: m})
		}
		waiting = resp.GetWaiting()
		if token = resp.GetNextPageToken(); token == "" {
			return holders, waiting, nil
		}
	}
}
