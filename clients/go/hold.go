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
	// LossSilence: the lease ran out: with a gateway that answers pings, no ping was answered
	// in time (the deadline is the send of the newest answered ping + silence_limit); with an
	// older one, nothing arrived on the stream for silence_limit (a frozen or cut-off gateway).
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
	kind     eventKind
	lease    string
	position uint32
	token    uint64
	// silence: the grant's silence_limit; for `queued`, the one a grant would carry.
	silence time.Duration
	// answersPings: `queued` says the gateway answers pings (lease.go).
	answersPings bool
	// pingSeq: the newest ping the gateway had read when it granted.
	pingSeq uint64
	// seq: the ping a heartbeat answers (0: unsolicited).
	seq        uint64
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
	sendPing(seq uint64) error
}

func queuedEvent(q *pb.Queued) event {
	return event{kind: evQueued, lease: q.GetLease(), position: q.GetPosition(),
		answersPings: q.GetAnswersPings(), silence: q.GetSilenceLimit().AsDuration()}
}

// stream is one open holder stream on one endpoint: it reads the stream, keeps the silence
// watchdog while holding (on the lease anchored by pings, with a gateway that answers them),
// and decides the loss (once). It never reconnects: the callers open
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
	// now is the clock the watchdog's deadline and the pings' send times are judged by
	// (time.Now; a seam for tests).
	now func() time.Time
	// ticker makes the ping timer (time.NewTicker; a seam for tests).
	ticker func(every time.Duration) (<-chan time.Time, func())
	// firstSent is when the first message (ping 1) was sent: read before the stream opened.
	firstSent time.Time
	// deadline is when silence becomes loss while the watchdog runs (zero otherwise): err
	// asks it too, so it answers right even before run has read on after a freeze. With a
	// gateway that answers pings: the send of the newest answered ping + silence_limit.
	deadline time.Time
	// anchored: the gateway answers pings, and the deadline is anchored on them.
	anchored bool
	// pings is the lease anchored by pings (nil with an older gateway); run's alone.
	pings *pingLease
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
	// Before the first message (ping 1) leaves: an anchor a little early only shortens the lease.
	firstSent := time.Now()
	rpc, err := open(ctx, conn)
	if err != nil {
		cancel()
		return nil, err
	}
	s := newStream(c, i, cancel, rpc)
	s.firstSent = firstSent
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
		now: time.Now, ticker: realTicker,
	}
}

func realTicker(every time.Duration) (<-chan time.Time, func()) {
	if every <= 0 {
		every = time.Millisecond
	}
	t := time.NewTicker(every)
	return t.C, t.Stop
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
	// arm (re)starts the watchdog for at; a new timer each time, so no stale tick is left.
	arm := func(at time.Time) {
		if watchdog != nil {
			watchdog.Stop()
		}
		deadline = at
		watchdog = time.NewTimer(at.Sub(s.now()))
		fire = watchdog.C
		s.setDeadline(at)
	}
	// The ping timer and the goroutine that sends the pings (with a gateway that answers them).
	var pingTick <-chan time.Time
	stopPinging := func() {}
	var toSend chan uint64
	ping := func() {
		seq := s.pings.ping(s.now())
		select {
		case toSend <- seq:
		default:
			// The sender is stuck in a full send buffer (the gateway stopped reading): this
			// ping is skipped, and the lease runs out by itself.
		}
	}
	pingEvery := func(every time.Duration) {
		stopPinging()
		pingTick, stopPinging = s.ticker(every)
	}
	defer func() {
		if watchdog != nil {
			watchdog.Stop()
		}
		stopPinging()
	}()
	silenced := func() {
		s.setDeadline(time.Time{})
		s.lose(LossSilence, s.silenceDetail())
		s.cancel()
		fire = nil
		stopPinging()
		pingTick = nil
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
			if fire != nil {
				if s.pings == nil {
					// An older gateway: anything at all from it proves it is alive.
					arm(s.now().Add(s.silence))
				} else if ev.kind == evHeartbeat {
					// Only an answer to a ping moves the anchored deadline, to that ping's
					// send + the limit; nothing else does (not heartbeat{seq: 0}).
					if at := s.pings.answered(ev.seq); at.After(deadline) {
						arm(at)
					}
				}
			}
			switch ev.kind {
			case evQueued:
				if ev.answersPings && s.pings == nil {
					s.pings = newPingLease(s.firstSent)
					s.mu.Lock()
					s.anchored = true
					s.mu.Unlock()
					toSend = make(chan uint64, 1)
					go s.sendPings(ctx, toSend)
					if ev.silence > 0 {
						// A waiter pings every third of the limit a grant would carry, so
						// that the grant names a recent ping.
						pingEvery(ev.silence / 3)
					}
				}
			case evGranted:
				if s.handleGrant(ev) {
					arm(s.getDeadline())
					if s.pings != nil {
						// Held on a lease: ping at once, then every quarter of it.
						ping()
						pingEvery(s.silence / 4)
					}
				} else {
					fire = nil
					stopPinging()
					pingTick = nil
				}
				continue
			}
			s.handle(ev)
		case <-fire:
			if now := s.now(); now.Before(deadline) {
				// Not due on this process's clock (the seam's, in tests): wait on.
				watchdog = time.NewTimer(deadline.Sub(now))
				fire = watchdog.C
				continue
			}
			silenced()
		case <-pingTick:
			if s.err() == nil {
				ping()
			}
		case err := <-failed:
			s.finish(err)
			return
		}
	}
}

// sendPings sends the pings run numbers, one at a time, until the stream is over.
func (s *stream) sendPings(ctx context.Context, seqs <-chan uint64) {
	for {
		select {
		case seq := <-seqs:
			s.sendMu.Lock()
			err := s.rpc.sendPing(seq)
			s.sendMu.Unlock()
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func (s *stream) silenceDetail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.silenceDetailLocked()
}

func (s *stream) silenceDetailLocked() string {
	if s.anchored {
		return fmt.Sprintf("no ping answered by %s in time (silence limit %v): it may be frozen, cut off or slow", s.endpoint, s.silence)
	}
	return fmt.Sprintf("nothing heard from %s for the silence limit (%v): it may be frozen or cut off", s.endpoint, s.silence)
}

// handleGrant records the grant (elected / acquired) and its deadline; true if held, false if
// it is lost as it is granted.
func (s *stream) handleGrant(ev event) bool {
	// The deadline: with pings, the send of the ping the grant names + its limit; without,
	// the grant's arrival + its limit (none without a limit).
	var until time.Time
	expired := false
	if s.pings != nil {
		at, ok := s.pings.granted(ev.silence, ev.pingSeq)
		// A grant naming no ping this stream sent, or whose lease ran out on its way (a link
		// slower than the limit allows): never held.
		expired = !ok || !s.now().Before(at)
		until = at
	} else if ev.silence > 0 {
		until = s.now().Add(ev.silence)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token, s.silence = ev.token, ev.silence
	if ev.leader != nil {
		s.leader = ev.leader
	}
	if ev.lease != "" && s.lease == "" {
		s.lease = ev.lease
	}
	if !expired {
		// Before granted is closed: whoever sees the grant sees its deadline too.
		s.deadline = until
	}
	closeOnce(s.granted)
	if s.suspendedQueued {
		// Granted while its gateway's link is still suspended: the hold is uncertain
		// from its first moment, so it is lost as it is granted.
		s.deadline = time.Time{}
		s.loseLocked(LossSuspended, fmt.Sprintf("%s granted the hold while its ZooKeeper connection was suspended (no resumed since)", s.endpoint))
		s.cancel()
		return false
	}
	if expired {
		s.loseLocked(LossSilence, fmt.Sprintf("%s granted the hold on a lease already over (ping %d; silence limit %v)", s.endpoint, ev.pingSeq, ev.silence))
		s.cancel()
		return false
	}
	return !until.IsZero()
}

// handle records one event other than the grant (handleGrant).
func (s *stream) handle(ev event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.kind {
	case evQueued:
		s.lease, s.position = ev.lease, ev.position
		closeOnce(s.queued)
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
		return &LostError{Reason: LossSilence, Detail: s.silenceDetailLocked()}
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
