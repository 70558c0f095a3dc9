package zkgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/zkgate/zkgate/clients/go/zkgatev1"
)

// LossReason says why a hold (leadership or lock) was lost. The four values are shared by
// every zkgate client (clients/CONFORMANCE.md).
type LossReason string

const (
	// LossSuspended: the gateway sent `suspended` (it lost ZooKeeper): stop at once.
	LossSuspended LossReason = "suspended"
	// LossSilence: nothing arrived on the stream for silence_limit (a frozen or cut-off
	// gateway).
	LossSilence LossReason = "silence"
	// LossUnavailable: the stream failed with UNAVAILABLE or on the transport (a draining or
	// crashed gateway).
	LossUnavailable LossReason = "unavailable"
	// LossEnded: the stream ended any other way (ABORTED, a resign or release by lease
	// elsewhere, an expired ttl).
	LossEnded LossReason = "ended"
)

// LostError is what a lost hold's Err returns.
type LostError struct {
	Reason LossReason
	// Detail is a sentence for people (the stream's status, the silence limit, …).
	Detail string
}

func (e *LostError) Error() string { return fmt.Sprintf("zkgate: lost (%s): %s", e.Reason, e.Detail) }

// ErrReleased is what Err returns after the hold was given up by Resign or Unlock.
var ErrReleased = errors.New("zkgate: released")

// event is one message of a Campaign or Acquire stream, in the shape both share.
type event struct {
	kind       eventKind
	lease      string
	position   uint32
	token      uint64
	silence    time.Duration
	leader     *pb.Leader // elected / proclaimed
	stopWithin time.Duration
	// endRequested: the suspended says a Resign/Release with this hold's lease asked the
	// gateway to end it (reason END_REQUESTED, contract G3c).
	endRequested bool
}

type eventKind int

const (
	evQueued eventKind = iota
	evGranted
	evSuspended
	evResumed
	evHeartbeat
	evProclaimed
	evOther
)

// holderRPC adapts one open Campaign or Acquire stream.
type holderRPC interface {
	recv() (event, error)
	sendLeave() error     // resign{} / release{}
	sendKeepAlive() error // keep_alive{} (locks with a ttl)
}

// stream is one open holder stream on one endpoint: it reads the stream, keeps the silence
// watchdog while holding, and decides the loss (once). It never reconnects: the callers open
// a new stream for that.
type stream struct {
	c        *Client
	epIdx    int
	endpoint string
	cancel   context.CancelFunc
	rpc      holderRPC
	sendMu   sync.Mutex

	queued  chan struct{} // closed at `queued`
	granted chan struct{} // closed at `elected`/`acquired`
	done    chan struct{} // closed when the hold is over: lost, released, or the stream ended
	ended   chan struct{} // closed when the stream is over and endErr is set

	mu       sync.Mutex
	lease    string
	position uint32
	token    uint64
	silence  time.Duration
	leader   *pb.Leader
	lost     *LostError
	released bool
	leaving  bool
	endErr   error // nil for OK
	// A `suspended` heard while queued and not followed by `resumed`: carried into a later
	// grant, which is then lost at once (see CONFORMANCE.md).
	suspendedQueued bool
	// now is the clock the watchdog's deadline is judged by (time.Now; a seam for tests).
	now func() time.Time
	// deadline is when silence becomes loss while the watchdog runs (zero otherwise): err
	// asks it too, so it answers right even before run has read on after a freeze.
	deadline time.Time
}

// openStream opens a holder stream on endpoint i; open makes the RPC (sending the first
// message) on a context that lives as long as the stream.
func (c *Client) openStream(i int, open func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error)) (*stream, error) {
	conn, err := c.conn(i)
	if err != nil {
		return nil, err
	}
	// The stream outlives the call that made it (Campaign returns it): its own context.
	ctx, cancel := context.WithCancel(context.Background())
	rpc, err := open(ctx, conn)
	if err != nil {
		cancel()
		return nil, err
	}
	s := newStream(c, i, cancel, rpc)
	go s.run(ctx)
	if ka, ok := rpc.(interface{ keepAliveInterval() time.Duration }); ok && ka.keepAliveInterval() > 0 {
		// From the first message on: the ttl runs while queued too, for all the client knows.
		go s.keepAlive(ka.keepAliveInterval())
	}
	return s, nil
}

func newStream(c *Client, i int, cancel context.CancelFunc, rpc holderRPC) *stream {
	return &stream{
		c: c, epIdx: i, endpoint: c.endpoints[i].name, cancel: cancel, rpc: rpc,
		queued: make(chan struct{}), granted: make(chan struct{}),
		done: make(chan struct{}), ended: make(chan struct{}),
		now: time.Now,
	}
}

// run reads the stream until it ends; ctx is the stream's own context.
func (s *stream) run(ctx context.Context) {
	events := make(chan event)
	failed := make(chan error, 1)
	go func() {
		for {
			ev, err := s.rpc.recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				// run may have returned; the next recv fails at once.
			}
		}
	}()
	var watchdog *time.Timer
	var fire <-chan time.Time
	var deadline time.Time // when fire is due
	defer func() {
		if watchdog != nil {
			watchdog.Stop()
		}
	}()
	silenced := func() {
		s.setDeadline(time.Time{})
		s.lose(LossSilence, fmt.Sprintf("nothing heard from %s for the silence limit (%v): it may be frozen or cut off", s.endpoint, s.silence))
		s.cancel()
		fire = nil
	}
	for {
		select {
		case ev := <-events:
			if fire != nil && !s.now().Before(deadline) {
				// Heard after the deadline (this process was frozen or starved while the
				// timer came due, and select picks at random between the two): the message
				// waited in the socket and says nothing about now. The silence came first
				// and is final (G3b).
				silenced()
				continue
			}
			if watchdog != nil && fire != nil {
				// Anything at all from the gateway proves it is alive.
				if !watchdog.Stop() {
					<-watchdog.C
				}
				watchdog.Reset(s.silence)
				deadline = s.now().Add(s.silence)
				s.setDeadline(deadline)
			}
			if s.handle(ev) && s.silence > 0 {
				watchdog = time.NewTimer(s.silence)
				fire = watchdog.C
				deadline = s.getDeadline() // set by handle
			}
		case <-fire:
			silenced()
		case err := <-failed:
			s.finish(err)
			return
		}
	}
}

// handle records one event; returns true for the grant.
func (s *stream) handle(ev event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.kind {
	case evQueued:
		s.lease, s.position = ev.lease, ev.position
		closeOnce(s.queued)
	case evGranted:
		s.token, s.silence = ev.token, ev.silence
		if ev.leader != nil {
			s.leader = ev.leader
		}
		if ev.lease != "" && s.lease == "" {
			s.lease = ev.lease
		}
		if ev.silence > 0 {
			// Before granted is closed: whoever sees the grant sees its deadline too.
			s.deadline = s.now().Add(ev.silence)
		}
		closeOnce(s.granted)
		if s.suspendedQueued {
			// Granted while its gateway's link is still suspended: the hold is uncertain
			// from its first moment, so it is lost as it is granted.
			s.loseLocked(LossSuspended, fmt.Sprintf("%s granted the hold while its ZooKeeper connection was suspended (no resumed since)", s.endpoint))
			s.cancel()
			return false
		}
		return true
	case evResumed:
		s.suspendedQueued = false
	case evProclaimed:
		if ev.leader != nil {
			s.leader = ev.leader
		}
	case evSuspended:
		if isClosed(s.granted) && ev.endRequested {
			// A Resign/Release with this hold's lease (contract G3c): told before anyone else
			// can be granted it, and the znode stays until we end the stream. Over, as an OK
			// end says (LossEnded); cancelling hands it over at once.
			s.loseLocked(LossEnded, fmt.Sprintf("%s: resigned or released by lease elsewhere", s.endpoint))
			s.cancel()
		} else if isClosed(s.granted) {
			s.loseLocked(LossSuspended, fmt.Sprintf("%s lost its ZooKeeper connection (a successor may be granted after %v)", s.endpoint, ev.stopWithin))
			s.cancel()
		} else {
			s.suspendedQueued = true
		}
	}
	return false
}

func (s *stream) lose(reason LossReason, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLocked(reason, detail)
}

func (s *stream) loseLocked(reason LossReason, detail string) {
	if s.lost != nil || s.released || s.leaving {
		return
	}
	s.lost = &LostError{Reason: reason, Detail: detail}
	if isClosed(s.granted) {
		s.c.logf("zkgate: hold on %s lost (%s): %s", s.endpoint, reason, detail)
	}
	closeOnce(s.done)
}

// finish classifies the end of the stream.
func (s *stream) finish(err error) {
	if err == io.EOF {
		err = nil
	}
	s.mu.Lock()
	s.endErr = err
	switch {
	case s.leaving:
		s.released = true
	case err == nil:
		s.loseLocked(LossEnded, "the stream ended OK: resigned or released by lease elsewhere")
	case status.Code(err) == codes.Unavailable:
		s.loseLocked(LossUnavailable, fmt.Sprintf("%s: %v", s.endpoint, err))
	default:
		s.loseLocked(LossEnded, fmt.Sprintf("%s: %v", s.endpoint, err))
	}
	closeOnce(s.done)
	s.mu.Unlock()
	s.cancel()
	close(s.ended)
}

// leave gives the hold (or the place in the queue) up in-stream and waits for the gateway to
// end the stream OK (the znode is then deleted); it cancels the stream after the call timeout
// or when ctx ends, which also makes the gateway delete the znode.
func (s *stream) leave(ctx context.Context) error {
	s.mu.Lock()
	if s.lost != nil || s.released || s.leaving || isClosed(s.ended) {
		s.mu.Unlock()
		s.cancel()
		return nil
	}
	s.leaving = true
	s.mu.Unlock()
	s.sendMu.Lock()
	err := s.rpc.sendLeave()
	s.sendMu.Unlock()
	if err == nil {
		t := time.NewTimer(s.c.cfg.callTimeout)
		select {
		case <-s.ended:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	s.cancel()
	<-s.ended
	s.mu.Lock()
	s.released = true
	s.mu.Unlock()
	return ctx.Err()
}

// keepAlive sends keep_alive{} every interval until the stream is over.
func (s *stream) keepAlive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.sendMu.Lock()
			err := s.rpc.sendKeepAlive()
			s.sendMu.Unlock()
			if err != nil {
				return
			}
		case <-s.ended:
			return
		}
	}
}

func (s *stream) getDeadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

func (s *stream) setDeadline(t time.Time) {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
}

func (s *stream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return s.lost
	}
	if s.released {
		return ErrReleased
	}
	if !s.deadline.IsZero() && !s.now().Before(s.deadline) {
		// Past the watchdog's deadline: lost by silence, whether or not run has read on yet
		// (a process just thawed); run decides it as soon as it does.
		return &LostError{Reason: LossSilence, Detail: fmt.Sprintf("nothing heard from %s for the silence limit (%v)", s.endpoint, s.silence)}
	}
	return nil
}

func (s *stream) reason() LossReason {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return s.lost.Reason
	}
	return ""
}

func (s *stream) getLease() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

func (s *stream) fencingToken() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

func (s *stream) silenceLimit() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silence
}

// establish opens streams until one is granted: a stream that fails with UNAVAILABLE (or on
// the transport, or cannot be opened) moves to the next endpoint, one that ends ABORTED
// (the gateway lost its session) tries the same endpoint again, both after backoff (reset
// once a stream was queued). Any other end is returned. When ctx ends first, the queued stream
// is given up and ctx's error returned.
func (c *Client) establish(ctx context.Context, b *backoffState, open func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error)) (*stream, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		i := c.current()
		s, err := c.openStream(i, open)
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				return nil, err
			}
			c.logf("zkgate: %s: %v", c.endpoints[i].name, err)
			c.advance(i)
			if werr := b.wait(ctx); werr != nil {
				return nil, werr
			}
			continue
		}
		select {
		case <-s.granted:
			return s, nil
		case <-s.ended:
			// A grant and an end can race: a granted stream is returned, already lost.
			if isClosed(s.granted) {
				return s, nil
			}
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), c.cfg.callTimeout)
			_ = s.leave(lctx)
			cancel()
			return nil, ctx.Err()
		}
		if isClosed(s.queued) {
			b.reset()
		}
		err = s.endErr
		switch status.Code(err) {
		case codes.Unavailable:
			c.logf("zkgate: %s: %v", s.endpoint, err)
			c.advance(i)
		case codes.Aborted:
			c.logf("zkgate: %s: %v", s.endpoint, err)
		default:
			if err == nil {
				err = errors.New("zkgate: the stream ended before the grant (resigned or released by lease)")
			}
			return nil, err
		}
		if werr := b.wait(ctx); werr != nil {
			return nil, werr
		}
	}
}

// runWhileHolding is RunWhileLeader and RunWhileHolding: get the hold, run fn with a context
// cancelled when the hold is lost, give the hold up when fn returns, and (with requeue) get it
// again after a loss: on the next endpoint when the gateway failed or went silent, on the same
// one otherwise, after backoff.
func (c *Client) runWhileHolding(ctx context.Context, requeue bool,
	get func(ctx context.Context, b *backoffState) (*stream, error),
	fn func(ctx context.Context, s *stream) error) error {
	b := c.newBackoff()
	for {
		s, err := get(ctx, b)
		if err != nil {
			return err
		}
		fctx, fcancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-s.done:
				fcancel()
			case <-fctx.Done():
			}
		}()
		ferr := fn(fctx, s)
		fcancel()
		lctx, lcancel := context.WithTimeout(context.Background(), c.cfg.callTimeout)
		_ = s.leave(lctx)
		lcancel()
		s.mu.Lock()
		lost := s.lost
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		if lost == nil {
			return ferr
		}
		if !requeue {
			return lost
		}
		if lost.Reason == LossUnavailable || lost.Reason == LossSilence {
			c.advance(s.epIdx)
		}
		if err := b.wait(ctx); err != nil {
			return err
		}
	}
}

func closeOnce(ch chan struct{}) {
	if !isClosed(ch) {
		close(ch)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
