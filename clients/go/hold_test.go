package zkgate

// The holder stream's rules without a gateway: a scripted stream feeds events and an end, and
// the tests check which loss (if any) is decided.

import (
	"context"
	"errors"
	"io"
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

func scripted(t *testing.T) (*stream, *scriptedRPC) {
	t.Helper()
	return scriptedAt(t, time.Now)
}

// scriptedAt is scripted with the watchdog's clock read from now.
func scriptedAt(t *testing.T, now func() time.Time) (*stream, *scriptedRPC) {
	t.Helper()
	c, err := New(WithEndpoints("gw:1"), WithCallTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &scriptedRPC{ctx: ctx, events: make(chan event), end: make(chan error, 1), leaves: make(chan struct{}, 1)}
	s := newStream(c, 0, cancel, r)
	s.now = now
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
