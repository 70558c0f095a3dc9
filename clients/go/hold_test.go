package zkgate

// The holder stream's rules without a gateway: a scripted stream feeds events and an end, and
// the tests check which loss (if any) is decided.

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type scriptedRPC struct {
	ctx    context.Context
	events chan event
	end    chan error
	leaves chan struct{}
	pings  chan uint64 // the pings sent, in order
}

func (r *scriptedRPC) recv() (event, error) {
	select {
	case e := <-r.events:
		return e, nil
	case err := <-r.end:
		return event{}, err
	case <-r.ctx.Done():
		return event{}, status.Error(codes.Canceled, "context canceled")
	}
}

// sendLeave: the gateway deletes the znode and ends the stream OK (gRPC's io.EOF).
func (r *scriptedRPC) sendLeave() error {
	r.leaves <- struct{}{}
	r.end <- io.EOF
	return nil
}

func (r *scriptedRPC) sendKeepAlive() error { return nil }

func (r *scriptedRPC) sendPing(seq uint64) error {
	select {
	case r.pings <- seq:
	default:
		panic("too many pings unread")
	}
	return nil
}

func scripted(t *testing.T) (*stream, *scriptedRPC) {
	t.Helper()
	return scriptedAt(t, time.Now)
}

// scriptedAt is scripted with the watchdog's clock read from now.
func scriptedAt(t *testing.T, now func() time.Time) (*stream, *scriptedRPC) {
	t.Helper()
	return scriptedWith(t, now, nil)
}

// scriptedWith is scripted with the watchdog's clock read from now, the first message (ping 1)
// sent at now(), and the ping timer made by ticker (nil: the real one).
func scriptedWith(t *testing.T, now func() time.Time, ticker func(time.Duration) (<-chan time.Time, func())) (*stream, *scriptedRPC) {
	t.Helper()
	c, err := New(WithEndpoints("gw:1"), WithCallTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &scriptedRPC{ctx: ctx, events: make(chan event), end: make(chan error, 1), leaves: make(chan struct{}, 1),
		pings: make(chan uint64, 1000)}
	s := newStream(c, 0, cancel, r)
	s.now = now
	s.firstSent = now()
	if ticker != nil {
		s.ticker = ticker
	}
	go s.run(ctx)
	return s, r
}

func waitDone(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("timed out")
	}
}

func granted(silence time.Duration) event {
	return event{kind: evGranted, token: 7, silence: silence}
}

func TestSuspendedLosesOnlyAGrantedHold(t *testing.T) {
	s, r := scripted(t)
	r.events <- event{kind: evQueued, lease: "L", position: 1}
	r.events <- event{kind: evSuspended, stopWithin: time.Second}
	r.events <- event{kind: evResumed}
	if isClosed(s.done) {
		t.Fatal("a queued candidate lost on suspended")
	}
	r.events <- granted(0)
	r.events <- event{kind: evSuspended, stopWithin: time.Second}
	waitDone(t, s.done)
	waitDone(t, s.ended) // the helper cancelled the stream
	if s.reason() != LossSuspended || s.fencingToken() != 7 || s.getLease() != "L" {
		t.Fatalf("reason %q token %d lease %q", s.reason(), s.fencingToken(), s.getLease())
	}
	var lost *LostError
	if !errors.As(s.err(), &lost) || lost.Reason != LossSuspended {
		t.Fatalf("err %v", s.err())
	}
}

// A suspension heard while queued and not resumed is carried into the grant: the hold is
// granted (its token known) and lost at once with reason suspended.
func TestAGrantWhileSuspendedIsLostAtOnce(t *testing.T) {
	s, r := scripted(t)
	r.events <- event{kind: evQueued, lease: "L", position: 1}
	r.events <- event{kind: evSuspended, stopWithin: time.Second}
	r.events <- granted(0)
	waitDone(t, s.done)
	waitDone(t, s.ended)
	if !isClosed(s.granted) || s.reason() != LossSuspended || s.fencingToken() != 7 {
		t.Fatalf("granted %v reason %q token %d", isClosed(s.granted), s.reason(), s.fencingToken())
	}
}

func TestStreamEndsReadByStatus(t *testing.T) {
	for _, tc := range []struct {
		end  error
		want LossReason
	}{
		{io.EOF, LossEnded}, // OK
		{status.Error(codes.Unavailable, "draining"), LossUnavailable},
		{status.Error(codes.Aborted, "session lost"), LossEnded},
		{status.Error(codes.Internal, "odd"), LossEnded},
	} {
		s, r := scripted(t)
		r.events <- granted(0)
		r.end <- tc.end
		waitDone(t, s.ended)
		if s.reason() != tc.want || !isClosed(s.done) {
			t.Errorf("end %v: reason %q, want %q", tc.end, s.reason(), tc.want)
		}
	}
}

func TestSilenceLosesAfterTheLimitButHeartbeatsKeepIt(t *testing.T) {
	const silence = 300 * time.Millisecond
	s, r := scripted(t)
	r.events <- granted(silence)
	// Heartbeats at a sixth of the limit (room for a slow machine) keep the hold for two limits.
	for i := 0; i < 12; i++ {
		time.Sleep(silence / 6)
		r.events <- event{kind: evHeartbeat}
	}
	if isClosed(s.done) {
		t.Fatalf("lost while heartbeats arrived: %v", s.err())
	}
	last := time.Now()
	waitDone(t, s.done)
	if took := time.Since(last); took < silence {
		t.Fatalf("silence decided after %v, before the limit %v", took, silence)
	}
	if s.reason() != LossSilence {
		t.Fatalf("reason %q", s.reason())
	}
	waitDone(t, s.ended) // the helper cancelled the stream
}

// A process frozen past its deadline (SIGSTOP, a stalled VM) finds, when it runs again, both
// its timer due and messages that waited in its socket meanwhile — heartbeats sent before its
// gateway froze too, say. Heard late they say nothing about now: the silence came first and is
// final (G3b; found by a probe that froze a holder, then its gateway, and saw the thawed holder
// hold on for another silence limit beside its successor). The clock here jumps past the
// deadline before the heartbeat is read, as it does for a frozen process.
func TestAMessageHeardAfterTheDeadlineDoesNotReviveTheHold(t *testing.T) {
	var skew atomic.Int64
	s, r := scriptedAt(t, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	r.events <- granted(time.Hour)
	waitDone(t, s.granted)
	skew.Store(int64(2 * time.Hour))
	// Asked now, before run has read anything more: lost by silence already.
	var lost *LostError
	if !errors.As(s.err(), &lost) || lost.Reason != LossSilence {
		t.Fatalf("past the deadline, before run reads on: err %v", s.err())
	}
	r.events <- event{kind: evHeartbeat}
	waitDone(t, s.done)
	if s.reason() != LossSilence {
		t.Fatalf("reason %q, want %q", s.reason(), LossSilence)
	}
	waitDone(t, s.ended) // the helper cancelled the stream
}

func TestLeaveIsARelease(t *testing.T) {
	s, r := scripted(t)
	r.events <- granted(time.Hour)
	if err := s.leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-r.leaves
	if !errors.Is(s.err(), ErrReleased) || s.reason() != "" || !isClosed(s.done) {
		t.Fatalf("after leave: err %v reason %q", s.err(), s.reason())
	}
	// A second leave, or one after a loss, does nothing.
	if err := s.leave(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The lease on the holder's own clock (lease.go; clients/CONFORMANCE.md "The lease on the
// holder's own clock (pings)").

// fakeClock is a clock that moves only when the test says.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// fakeTicker is a ping timer the test turns by hand.
type fakeTicker struct {
	every time.Duration
	c     chan time.Time
}

// fakeTickers is a ticker seam whose tickers are handed to the test as they are made.
func fakeTickers() (func(time.Duration) (<-chan time.Time, func()), chan fakeTicker) {
	made := make(chan fakeTicker, 10)
	return func(every time.Duration) (<-chan time.Time, func()) {
		tk := fakeTicker{every: every, c: make(chan time.Time)}
		made <- tk
		return tk.c, func() {}
	}, made
}

func nextTicker(t *testing.T, made chan fakeTicker) fakeTicker {
	t.Helper()
	select {
	case tk := <-made:
		return tk
	case <-time.After(5 * time.Second):
		t.Fatal("no ping timer made")
	}
	return fakeTicker{}
}

func nextPing(t *testing.T, r *scriptedRPC) uint64 {
	t.Helper()
	select {
	case seq := <-r.pings:
		return seq
	case <-time.After(5 * time.Second):
		t.Fatal("no ping sent")
	}
	return 0
}

// flush returns once run has handled every event sent before it: run takes the second of two
// no-op events only after it has handled the first, and the first only after everything before.
func flush(r *scriptedRPC) {
	r.events <- event{kind: evOther}
	r.events <- event{kind: evOther}
}

func queuedPinging(limit time.Duration) event {
	return event{kind: evQueued, lease: "L", position: 1, answersPings: true, silence: limit}
}

func grantedOn(limit time.Duration, pingSeq uint64) event {
	return event{kind: evGranted, token: 7, silence: limit, pingSeq: pingSeq}
}

func TestTheLeaseRunsFromTheSendOfTheNewestAnsweredPing(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		what    string
		pings   []int // sent at these offsets (ms), seq 2, 3, …
		grant   uint64
		answers []uint64
		want    int // the deadline's offset (ms); -1: nothing anchors the hold
	}{
		{"granted at once on the join", nil, 1, nil, 1000},
		{"a waiter's newest ping", []int{300, 600}, 3, nil, 1600},
		{"granted on 2, then 3 answered", []int{300, 600}, 2, []uint64{3}, 1600},
		{"a replayed answer moves nothing", []int{300}, 2, []uint64{2, 2}, 1300},
		{"an older answer moves nothing back", []int{300, 600}, 3, []uint64{2}, 1600},
		{"unsolicited or unknown: nothing", []int{300}, 2, []uint64{0, 9}, 1300},
		{"a grant naming no ping anchors nothing", []int{300}, 0, nil, -1},
		{"a grant naming an unknown ping anchors nothing", []int{300}, 7, []uint64{2}, -1},
	} {
		l := newPingLease(t0)
		for i, at := range tc.pings {
			if seq := l.ping(t0.Add(ms(at))); seq != uint64(i+2) {
				t.Fatalf("%s: ping %d numbered %d", tc.what, i+2, seq)
			}
		}
		until, ok := l.granted(ms(1000), tc.grant)
		for _, a := range tc.answers {
			until = l.answered(a)
		}
		switch {
		case tc.want < 0 && (ok || !until.IsZero()):
			t.Errorf("%s: anchored until +%v", tc.what, until.Sub(t0))
		case tc.want >= 0 && (!ok || !until.Equal(t0.Add(ms(tc.want)))):
			t.Errorf("%s: until +%v (ok %v), want +%dms", tc.what, until.Sub(t0), ok, tc.want)
		}
	}
}

func TestOnlyTheNewestPingsAreRemembered(t *testing.T) {
	t0 := time.Now()
	l := newPingLease(t0)
	for i := 0; i < pingsRemembered+10; i++ {
		l.ping(t0.Add(time.Duration(i) * time.Millisecond))
	}
	if len(l.sent) != pingsRemembered {
		t.Fatalf("%d remembered", len(l.sent))
	}
	if _, ok := l.granted(time.Second, 1); ok {
		t.Fatal("the join's ping is forgotten, yet it anchored the grant")
	}
	if l.answered(l.lastSeq).IsZero() {
		t.Fatal("the newest ping's answer anchored nothing")
	}
	if len(l.sent) != 0 {
		t.Fatalf("answered and older pings still remembered: %v", l.sent)
	}
}

// With a gateway that answers pings, the deadline is the send of the newest answered ping +
// the limit: a waiter pings every third of the limit `queued` announced, a holder at once and
// every quarter of its own; messages that answer nothing move nothing, and an answer arriving
// late gives only what its ping's send allowed.
func TestAnAnchoredLeaseRunsFromTheSendOfTheNewestAnsweredPing(t *testing.T) {
	clk := newFakeClock()
	t0 := clk.now()
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ticker, made := fakeTickers()
	s, r := scriptedWith(t, clk.now, ticker)
	r.events <- queuedPinging(900 * time.Millisecond)
	waiting := nextTicker(t, made)
	if waiting.every != 300*time.Millisecond {
		t.Fatalf("a waiter pings every %v, want a third of 900ms", waiting.every)
	}
	for i, n := range []int{300, 600, 900} {
		clk.set(at(n))
		waiting.c <- clk.now()
		if seq := nextPing(t, r); seq != uint64(i+2) {
			t.Fatalf("waiting ping %d numbered %d", i+2, seq)
		}
	}
	// Granted on ping 4 (sent at 900 ms), read at 1000 ms: held until 1800 ms.
	clk.set(at(1000))
	r.events <- grantedOn(900*time.Millisecond, 4)
	waitDone(t, s.granted)
	if d := s.getDeadline(); !d.Equal(at(1800)) {
		t.Fatalf("deadline +%v after the grant, want +1.8s", d.Sub(t0))
	}
	if seq := nextPing(t, r); seq != 5 {
		t.Fatalf("pinged %d at the grant, want 5", seq)
	}
	holding := nextTicker(t, made)
	if holding.every != 225*time.Millisecond {
		t.Fatalf("a holder pings every %v, want a quarter of 900ms", holding.every)
	}
	// Unsolicited heartbeats and other messages move nothing.
	clk.set(at(1100))
	r.events <- event{kind: evHeartbeat}
	r.events <- event{kind: evProclaimed}
	flush(r)
	if d := s.getDeadline(); !d.Equal(at(1800)) {
		t.Fatalf("deadline +%v after heartbeat{0} and proclaimed, want +1.8s", d.Sub(t0))
	}
	// Ping 6 at 1225 ms. The answer to ping 5 arrives 600 ms late: the lease runs from its send.
	clk.set(at(1225))
	holding.c <- clk.now()
	if seq := nextPing(t, r); seq != 6 {
		t.Fatalf("holding ping numbered %d, want 6", seq)
	}
	clk.set(at(1600))
	r.events <- event{kind: evHeartbeat, seq: 5}
	flush(r)
	if d := s.getDeadline(); !d.Equal(at(1900)) {
		t.Fatalf("deadline +%v after the answer to ping 5, want +1.9s", d.Sub(t0))
	}
	// Replayed, older and unknown answers move nothing.
	r.events <- event{kind: evHeartbeat, seq: 5}
	r.events <- event{kind: evHeartbeat, seq: 3}
	r.events <- event{kind: evHeartbeat, seq: 99}
	flush(r)
	if d := s.getDeadline(); !d.Equal(at(1900)) {
		t.Fatalf("deadline +%v after replayed/older/unknown answers, want +1.9s", d.Sub(t0))
	}
	// Nothing more answered: lost at 1900 ms (not 900 ms after the last message heard), and a
	// message read then is the loss, not a renewal.
	clk.set(at(1899))
	if err := s.err(); err != nil {
		t.Fatalf("lost before the deadline: %v", err)
	}
	clk.set(at(1900))
	var lost *LostError
	if !errors.As(s.err(), &lost) || lost.Reason != LossSilence {
		t.Fatalf("at the deadline: err %v", s.err())
	}
	// Read now, the answer to ping 6 is the loss (unless the watchdog's timer came first).
	select {
	case r.events <- event{kind: evHeartbeat, seq: 6}:
	case <-s.ended:
	}
	waitDone(t, s.done)
	if s.reason() != LossSilence {
		t.Fatalf("reason %q", s.reason())
	}
	waitDone(t, s.ended) // the helper cancelled the stream
}

// A grant whose lease is over when it arrives (its ping sent longer than the limit ago: a link
// slower than the limit allows), or that names no ping this stream sent, is recorded and lost
// at once with reason silence.
func TestAGrantWhoseLeaseRanOutOnItsWayIsLostAtOnce(t *testing.T) {
	for _, tc := range []struct {
		what    string
		pingSeq uint64
		late    time.Duration
	}{{"late", 1, 600 * time.Millisecond}, {"exactly at the deadline", 1, 500 * time.Millisecond},
		{"no ping", 0, 0}, {"unknown", 9, 0}} {
		clk := newFakeClock()
		ticker, _ := fakeTickers()
		s, r := scriptedWith(t, clk.now, ticker)
		r.events <- queuedPinging(10 * time.Second)
		clk.set(clk.now().Add(tc.late))
		r.events <- grantedOn(500*time.Millisecond, tc.pingSeq)
		waitDone(t, s.done)
		waitDone(t, s.ended) // the helper cancelled the stream
		var lost *LostError
		if !isClosed(s.granted) || s.fencingToken() != 7 || s.reason() != LossSilence ||
			!errors.As(s.err(), &lost) || lost.Reason != LossSilence {
			t.Errorf("%s: granted %v token %d reason %q err %v", tc.what, isClosed(s.granted), s.fencingToken(), s.reason(), s.err())
		}
	}
}

// Against a fake gateway that answers every ping on the real clock: the hold lasts as long as
// the answers come, and unsolicited heartbeats alone do not keep it.
func TestAnsweredPingsKeepTheHoldAndUnsolicitedHeartbeatsDoNot(t *testing.T) {
	const limit = 300 * time.Millisecond
	s, r := scripted(t)
	var answering atomic.Bool
	answering.Store(true)
	var answered atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	r.events <- queuedPinging(limit)
	// A waiter's ping (every 100 ms): the grant names it.
	newest := nextPing(t, r)
	r.events <- grantedOn(limit, newest)
	waitDone(t, s.granted)
	go func() {
		hb := time.NewTicker(limit / 6)
		defer hb.Stop()
		for {
			select {
			case seq := <-r.pings:
				if answering.Load() {
					answered.Add(1)
					select {
					case r.events <- event{kind: evHeartbeat, seq: seq}:
					case <-stop:
						return
					}
				}
			case <-hb.C:
				select {
				case r.events <- event{kind: evHeartbeat}:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	time.Sleep(4 * limit)
	if isClosed(s.done) {
		t.Fatalf("lost while its pings were answered: %v", s.err())
	}
	// A holder pings every 75 ms: some 16 in 1.2 s; at least half of them, on a slow machine.
	if n := answered.Load(); n < 8 {
		t.Fatalf("only %d pings answered in %v", n, 4*limit)
	}
	answering.Store(false)
	stopped := time.Now()
	waitDone(t, s.done)
	took := time.Since(stopped)
	t.Logf("lost %v after the answers stopped (heartbeat{0} every %v went on)", took, limit/6)
	if s.reason() != LossSilence {
		t.Fatalf("reason %q", s.reason())
	}
	if took > limit+time.Second {
		t.Fatalf("lost only %v after the answers stopped", took)
	}
}

// With a gateway that does not answer pings (`queued.answers_pings` false), no ping is sent and
// every message heard restarts the watchdog, as before.
func TestWithAnOlderGatewayEveryMessageRenewsTheWatchdog(t *testing.T) {
	clk := newFakeClock()
	ticker, made := fakeTickers()
	s, r := scriptedWith(t, clk.now, ticker)
	r.events <- event{kind: evQueued, lease: "L", position: 1, silence: 900 * time.Millisecond}
	r.events <- grantedOn(300*time.Millisecond, 0) // ping_seq 0: an older gateway's grant
	waitDone(t, s.granted)
	if s.err() != nil {
		t.Fatalf("lost at the grant: %v", s.err())
	}
	if d := s.getDeadline(); !d.Equal(clk.now().Add(300 * time.Millisecond)) {
		t.Fatalf("deadline %v after the grant, want its arrival + the limit", d.Sub(clk.now()))
	}
	clk.set(clk.now().Add(200 * time.Millisecond))
	r.events <- event{kind: evHeartbeat}
	flush(r)
	if d := s.getDeadline(); !d.Equal(clk.now().Add(300 * time.Millisecond)) {
		t.Fatalf("deadline %v after a heartbeat, want its arrival + the limit", d.Sub(clk.now()))
	}
	select {
	case tk := <-made:
		t.Fatalf("a ping timer (every %v) for a gateway that does not answer pings", tk.every)
	case seq := <-r.pings:
		t.Fatalf("ping %d sent to a gateway that does not answer pings", seq)
	default:
	}
}
