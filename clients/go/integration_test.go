package zkgate_test

// Tests against real gateways on one ZooKeeper, started by tests/go_client.rs, which passes:
//
//	ZKGATE_ADDR, ZKGATE_PID              the main gateway (frozen by the watchdog test)
//	ZKGATE_ZK_PID                        the ZooKeeper of every gateway (frozen by one test)
//	ZKGATE_DRAIN_ADDR, ZKGATE_DRAIN_PID  a gateway TestFailoverFromDrainedGateway drains
//	ZKGATE_KILL_ADDR, ZKGATE_KILL_PID    a gateway TestFailoverFromKilledGateway kills
//	ZKGATE_SESSION_TIMEOUT_MS            the gateways' session timeout
//
// Without ZKGATE_ADDR every test skips (tests/go_client.rs fails on a skip). Tests run in file
// order; the ones that stop a gateway come last.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	zkgate "github.com/zkgate/zkgate/clients/go"
	pb "github.com/zkgate/zkgate/clients/go/zkgatev1"
)

// wait bounds every wait for something that should happen promptly (not a timing assertion:
// a generous ceiling so that a broken helper fails instead of hanging).
const wait = 10 * time.Second

func gateway(t *testing.T, which string) (addr string, pid int) {
	t.Helper()
	addr = os.Getenv("ZKGATE_" + which + "ADDR")
	if addr == "" {
		t.Skip("ZKGATE_" + which + "ADDR not set: run through tests/go_client.rs")
	}
	if p := os.Getenv("ZKGATE_" + which + "PID"); p != "" {
		pid, _ = strconv.Atoi(p)
	}
	return "http://" + addr, pid
}

func sessionTimeout(t *testing.T) time.Duration {
	ms, err := strconv.Atoi(os.Getenv("ZKGATE_SESSION_TIMEOUT_MS"))
	if err != nil {
		t.Fatalf("ZKGATE_SESSION_TIMEOUT_MS: %v", err)
	}
	return time.Duration(ms) * time.Millisecond
}

func newClient(t *testing.T, endpoints ...string) *zkgate.Client {
	t.Helper()
	c, err := zkgate.New(zkgate.WithEndpoints(endpoints...), zkgate.WithLogger(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// uniqueName is a fresh election or lock name per test (several runs share one ZooKeeper).
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", strings.ReplaceAll(t.Name(), "/", "."), rand.New(rand.NewSource(time.Now().UnixNano())).Int63())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

type result[T any] struct {
	v   T
	err error
}

func async[T any](f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	return ch
}

func await[T any](t *testing.T, what string, ch <-chan result[T]) T {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.v
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

func pending[T any](t *testing.T, what string, ch <-chan result[T]) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s happened too early (err %v)", what, r.err)
	default:
	}
}

func candidates(t *testing.T, c *zkgate.Client, name string) []string {
	t.Helper()
	cs, err := c.Candidates(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range cs {
		out = append(out, m.Candidate)
	}
	return out
}

func TestElectionOrderResignAndLeader(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)

	if _, err := c.Leader(ctx, name); !errors.Is(err, zkgate.ErrNoLeader) {
		t.Fatalf("Leader of a vacant election: %v, want ErrNoLeader", err)
	}
	a, err := c.Campaign(ctx, name, "a", []byte("va"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Err() != nil || closed(a.Done()) || a.FencingToken() == 0 || a.Endpoint() != addr || a.SilenceLimit() <= 0 {
		t.Fatalf("fresh leadership: err %v token %d endpoint %s silence %v", a.Err(), a.FencingToken(), a.Endpoint(), a.SilenceLimit())
	}
	b := async(func() (*zkgate.Leadership, error) { return c.Campaign(ctx, name, "b", nil) })
	waitFor(t, "b queued", func() bool { return len(candidates(t, c, name)) == 2 })
	cc := async(func() (*zkgate.Leadership, error) { return c.Campaign(ctx, name, "c", nil) })
	waitFor(t, "c queued", func() bool { return len(candidates(t, c, name)) == 3 })
	if got := strings.Join(candidates(t, c, name), ","); got != "a,b,c" {
		t.Fatalf("queue %s, want a,b,c", got)
	}
	l, err := c.Leader(ctx, name)
	if err != nil || l.Candidate != "a" || string(l.Value) != "va" || l.FencingToken != a.FencingToken() {
		t.Fatalf("Leader: %+v %v", l, err)
	}
	pending(t, "b elected while a leads", b)

	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !closed(a.Done()) || !errors.Is(a.Err(), zkgate.ErrReleased) || a.Reason() != "" {
		t.Fatalf("after Resign: done %v err %v reason %q", closed(a.Done()), a.Err(), a.Reason())
	}
	lb := await(t, "b elected", b)
	if lb.FencingToken() <= a.FencingToken() {
		t.Fatalf("token went from %d to %d", a.FencingToken(), lb.FencingToken())
	}
	pending(t, "c elected while b leads", cc)
	if err := lb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lc := await(t, "c elected", cc)
	if lc.FencingToken() <= lb.FencingToken() || lc.Leader().Candidate != "c" {
		t.Fatalf("c: token %d after %d, leader %+v", lc.FencingToken(), lb.FencingToken(), lc.Leader())
	}
	if err := lc.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vacancy", func() bool { _, err := c.Leader(ctx, name); return errors.Is(err, zkgate.ErrNoLeader) })
}

func TestCampaignRefusedAndCancelled(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	if _, err := c.Campaign(context.Background(), "no/slashes", "a", nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad name: %v, want INVALID_ARGUMENT", err)
	}
	name := uniqueName(t)
	a, err := c.Campaign(context.Background(), name, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := async(func() (*zkgate.Leadership, error) { return c.Campaign(ctx, name, "b", nil) })
	waitFor(t, "b queued", func() bool { return len(candidates(t, c, name)) == 2 })
	cancel()
	select {
	case r := <-b:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled campaign: %v", r.err)
		}
	case <-time.After(wait):
		t.Fatal("cancelled campaign did not return")
	}
	// Giving up while queued leaves the queue.
	waitFor(t, "b gone from the queue", func() bool { return strings.Join(candidates(t, c, name), ",") == "a" })
	_ = a.Resign(context.Background())
}

func TestFailoverWhenTheLeadersStreamEnds(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)
	a, err := c.Campaign(ctx, name, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b := async(func() (*zkgate.Leadership, error) { return c.Campaign(ctx, name, "b", []byte("b1")) })
	waitFor(t, "b queued", func() bool { return len(candidates(t, c, name)) == 2 })
	// A resign by lease from elsewhere ends a's stream OK: a loss for a ("ended").
	if err := c.ResignLease(ctx, a.Lease()); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "a's loss", a.Done())
	var lost *zkgate.LostError
	if !errors.As(a.Err(), &lost) || lost.Reason != zkgate.LossEnded || a.Reason() != zkgate.LossEnded {
		t.Fatalf("a's loss: %v", a.Err())
	}
	lb := await(t, "b elected", b)
	if lb.FencingToken() <= a.FencingToken() {
		t.Fatalf("token went from %d to %d", a.FencingToken(), lb.FencingToken())
	}
	if err := lb.Proclaim(ctx, []byte("b2")); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Leader(ctx, name); err != nil || string(l.Value) != "b2" || string(lb.Leader().Value) != "b2" {
		t.Fatalf("after Proclaim: %+v %v", l, err)
	}
	if err := c.ResignLease(ctx, a.Lease()); status.Code(err) != codes.NotFound {
		t.Fatalf("spent lease: %v, want NOT_FOUND", err)
	}
	_ = lb.Resign(ctx)
}

func TestObserveMany(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := uniqueName(t) + "."
	a, err := c.Campaign(ctx, prefix+"one", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	obs := c.ObserveMany(ctx, prefix, []string{prefix + "named"})
	next := func(what string) zkgate.ManyEvent {
		t.Helper()
		select {
		case e, ok := <-obs:
			if !ok {
				t.Fatalf("observe many closed before %s", what)
			}
			return e
		case <-time.After(wait):
			t.Fatalf("timed out observing %s", what)
		}
		panic("unreachable")
	}
	snapshot := map[string]zkgate.Leader{}
	for e := next("the snapshot"); !e.SnapshotComplete; e = next("the snapshot") {
		snapshot[e.Election] = e.Leader
	}
	if l := snapshot[prefix+"one"]; l.Candidate != "a" || l.FencingToken != a.FencingToken() {
		t.Fatalf("snapshot %+v", snapshot)
	}
	if l, ok := snapshot[prefix+"named"]; !ok || !l.Vacant() {
		t.Fatalf("a named election that does not exist is vacant: %+v", snapshot)
	}
	b, err := c.Campaign(ctx, prefix+"two", "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A new election may first show as vacant: listed before its leader is confirmed.
	e := next("the new election")
	for e.Election == prefix+"two" && e.Leader.Vacant() {
		e = next("the new election's leader")
	}
	if e.Election != prefix+"two" || e.Leader.Candidate != "b" {
		t.Fatalf("observed %+v", e)
	}
	_ = a.Resign(ctx)
	if e := next("the vacancy"); e.Election != prefix+"one" || !e.Leader.Vacant() {
		t.Fatalf("observed %+v", e)
	}
	_ = b.Resign(ctx)
}

func TestObserve(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueName(t)
	obs := c.Observe(ctx, name)
	next := func(what string) zkgate.Leader {
		t.Helper()
		select {
		case l, ok := <-obs:
			if !ok {
				t.Fatalf("observe closed before %s", what)
			}
			return l
		case <-time.After(wait):
			t.Fatalf("timed out observing %s", what)
		}
		panic("unreachable")
	}
	if l := next("the vacant state"); !l.Vacant() || l.Election != name {
		t.Fatalf("first observation %+v, want vacant", l)
	}
	a, err := c.Campaign(ctx, name, "a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if l := next("a"); l.Candidate != "a" || l.FencingToken != a.FencingToken() || string(l.Value) != "1" {
		t.Fatalf("observed %+v", l)
	}
	if err := a.Proclaim(ctx, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if l := next("the proclaim"); l.Candidate != "a" || string(l.Value) != "2" {
		t.Fatalf("observed %+v", l)
	}
	b := async(func() (*zkgate.Leadership, error) { return c.Campaign(ctx, name, "b", nil) })
	waitFor(t, "b queued", func() bool { return len(candidates(t, c, name)) == 2 })
	_ = a.Resign(ctx)
	lb := await(t, "b elected", b)
	for {
		l := next("b")
		if l.Vacant() {
			continue // the instant between a and b
		}
		if l.Candidate != "b" || l.FencingToken != lb.FencingToken() || l.FencingToken <= a.FencingToken() {
			t.Fatalf("observed %+v after a (token %d)", l, a.FencingToken())
		}
		break
	}
	cancel()
	for range obs {
	}
}

func TestRunWhileLeaderRequeuesAfterALoss(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueName(t)
	terms := make(chan *zkgate.Leadership, 4)
	ends := make(chan zkgate.LossReason, 4)
	run := async(func() (struct{}, error) {
		return struct{}{}, c.RunWhileLeader(ctx, name, "r", nil, func(fctx context.Context, l *zkgate.Leadership) error {
			terms <- l
			<-fctx.Done()
			ends <- l.Reason()
			return nil
		})
	})
	first := <-terms
	if err := c.ResignLease(context.Background(), first.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ends:
		if r != zkgate.LossEnded {
			t.Fatalf("first term ended with %q", r)
		}
	case <-time.After(wait):
		t.Fatal("fn's context was not cancelled on the loss")
	}
	var second *zkgate.Leadership
	select {
	case second = <-terms:
	case <-time.After(wait):
		t.Fatal("not requeued after the loss")
	}
	if second.FencingToken() <= first.FencingToken() {
		t.Fatalf("token went from %d to %d", first.FencingToken(), second.FencingToken())
	}
	cancel()
	select {
	case r := <-run:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("run returned %v", r.err)
		}
	case <-time.After(wait):
		t.Fatal("run did not return after cancel")
	}
	if !errors.Is(second.Err(), zkgate.ErrReleased) {
		t.Fatalf("the run did not resign: %v", second.Err())
	}

	// Without requeue the first loss ends the run.
	ctx2 := context.Background()
	once := async(func() (struct{}, error) {
		return struct{}{}, c.RunWhileLeader(ctx2, name, "once", nil, func(fctx context.Context, l *zkgate.Leadership) error {
			terms <- l
			<-fctx.Done()
			return nil
		}, zkgate.WithRequeue(false))
	})
	l := <-terms
	_ = c.ResignLease(ctx2, l.Lease())
	select {
	case r := <-once:
		var lost *zkgate.LostError
		if !errors.As(r.err, &lost) || lost.Reason != zkgate.LossEnded {
			t.Fatalf("run without requeue returned %v", r.err)
		}
	case <-time.After(wait):
		t.Fatal("run without requeue did not return")
	}
}

func holders(t *testing.T, c *zkgate.Client, name string) ([]zkgate.Holder, uint32) {
	t.Helper()
	h, w, err := c.Holders(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return h, w
}

func TestMutexTryLockAndWaitTimeout(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)
	l1, err := c.Lock(ctx, name, zkgate.WithOwner("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, name); !errors.Is(err, zkgate.ErrLocked) {
		t.Fatalf("TryLock on a held lock: %v", err)
	}
	if _, err := c.Lock(ctx, name, zkgate.WithWaitTimeout(100*time.Millisecond)); !errors.Is(err, zkgate.ErrWaitTimeout) {
		t.Fatalf("Lock with a wait timeout on a held lock: %v", err)
	}
	l2 := async(func() (*zkgate.Lock, error) { return c.Lock(ctx, name, zkgate.WithOwner("two")) })
	waitFor(t, "two waiting", func() bool { _, w := holders(t, c, name); return w == 1 })
	if h, _ := holders(t, c, name); len(h) != 1 || h[0].Owner != "one" || h[0].FencingToken != l1.FencingToken() {
		t.Fatalf("holders %+v", h)
	}
	pending(t, "two acquired while one holds", l2)
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l1.Err(), zkgate.ErrReleased) {
		t.Fatalf("after Unlock: %v", l1.Err())
	}
	two := await(t, "two acquired", l2)
	if two.FencingToken() <= l1.FencingToken() {
		t.Fatalf("token went from %d to %d", l1.FencingToken(), two.FencingToken())
	}
	_ = two.Unlock(ctx)
	three, err := c.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	_ = three.Unlock(ctx)
}

func TestSemaphore(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)
	two := zkgate.WithPermits(2)
	a, err := c.Lock(ctx, name, two)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, name, two)
	if err != nil {
		t.Fatalf("second permit: %v", err)
	}
	if _, err := c.TryLock(ctx, name, two); !errors.Is(err, zkgate.ErrLocked) {
		t.Fatalf("third holder of two permits: %v", err)
	}
	if _, err := c.TryLock(ctx, name, zkgate.WithPermits(3)); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("disagreeing permits: %v, want FAILED_PRECONDITION", err)
	}
	third := async(func() (*zkgate.Lock, error) { return c.Lock(ctx, name, two) })
	waitFor(t, "the third waiting", func() bool { _, w := holders(t, c, name); return w == 1 })
	pending(t, "third acquired with both permits taken", third)
	_ = a.Unlock(ctx)
	l3 := await(t, "third acquired", third)
	waitFor(t, "two holders", func() bool { h, w := holders(t, c, name); return len(h) == 2 && w == 0 })
	_ = b.Unlock(ctx)
	_ = l3.Unlock(ctx)
}

func TestReadWriteLock(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)
	read := zkgate.WithMode(zkgate.Read)
	r1, err := c.Lock(ctx, name, read)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.TryLock(ctx, name, read)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	waitFor(t, "two readers holding", func() bool {
		h, _ := holders(t, c, name)
		return len(h) == 2 && h[0].Mode == zkgate.Read && h[1].Mode == zkgate.Read
	})
	if _, err := c.TryLock(ctx, name); !errors.Is(err, zkgate.ErrLocked) {
		t.Fatalf("a writer while readers hold: %v", err)
	}
	w := async(func() (*zkgate.Lock, error) { return c.Lock(ctx, name) })
	waitFor(t, "the writer waiting", func() bool { _, n := holders(t, c, name); return n == 1 })
	// FIFO: a reader arriving after a waiting writer waits too.
	if _, err := c.TryLock(ctx, name, read); !errors.Is(err, zkgate.ErrLocked) {
		t.Fatalf("a reader behind a waiting writer: %v", err)
	}
	_ = r1.Unlock(ctx)
	pending(t, "writer acquired while a reader holds", w)
	_ = r2.Unlock(ctx)
	wl := await(t, "writer acquired", w)
	waitFor(t, "the writer holding", func() bool {
		h, _ := holders(t, c, name)
		return len(h) == 1 && h[0].Mode == zkgate.Write && h[0].FencingToken == wl.FencingToken()
	})
	_ = wl.Unlock(ctx)
}

func TestTTLKeepAlive(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond

	// Control: a bare stream that never sends keep_alive loses the lock (so the check below
	// can fail).
	conn, err := grpc.Dial(strings.TrimPrefix(addr, "http://"), grpc.WithInsecure()) //nolint:staticcheck
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bare := uniqueName(t) + "-bare"
	st, err := pb.NewLockClient(conn).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.AcquireRequest{Request: &pb.AcquireRequest_Acquire{Acquire: &pb.AcquireLock{
		Name: bare, Owner: "bare", Ttl: durationpb.New(ttl)}}}); err != nil {
		t.Fatal(err)
	}
	ended := async(func() (struct{}, error) {
		for {
			if _, err := st.Recv(); err != nil {
				return struct{}{}, err
			}
		}
	})
	select {
	case r := <-ended:
		if status.Code(r.err) != codes.Aborted {
			t.Fatalf("a ttl lock without keep-alives ended with %v, want ABORTED", r.err)
		}
	case <-time.After(wait):
		t.Fatal("a ttl lock without keep-alives was kept")
	}

	// The helper keeps it alive: held across many ttls.
	name := uniqueName(t)
	l, err := c.Lock(ctx, name, zkgate.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatalf("lost a kept-alive ttl lock: %v", l.Err())
	case <-time.After(5 * ttl):
	}
	if h, _ := holders(t, c, name); len(h) != 1 || h[0].FencingToken != l.FencingToken() {
		t.Fatalf("holders %+v", h)
	}
	_ = l.Unlock(ctx)
}

func TestRunWhileHolding(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	name := uniqueName(t)
	var token uint64
	err := c.RunWhileHolding(context.Background(), name, func(ctx context.Context, l *zkgate.Lock) error {
		token = l.FencingToken()
		waitFor(t, "the job holding", func() bool { h, _ := holders(t, c, name); return len(h) == 1 && h[0].Owner == "job" })
		return errors.New("job done")
	}, zkgate.WithOwner("job"))
	if err == nil || err.Error() != "job done" || token == 0 {
		t.Fatalf("RunWhileHolding returned %v (token %d)", err, token)
	}
	waitFor(t, "the lock released", func() bool { h, _ := holders(t, c, name); return len(h) == 0 })
}

// term is one grant seen by a run-while helper.
type term struct {
	endpoint string
	token    uint64
}

// failover runs RunWhileLeader and RunWhileHolding on [victim, main]; once both hold on the
// victim, hurt (drain or kill) it, and check that both losses read `want` and that both
// hold again on the main gateway with larger tokens within `bound`. An observer on the same
// pair follows the election across, its tokens never going down.
func failover(t *testing.T, victim, main string, hurt func(), want zkgate.LossReason, bound time.Duration) {
	c := newClient(t, victim, main)
	observer := newClient(t, victim, main)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueName(t)
	type run struct {
		what    string
		terms   chan term
		reasons chan zkgate.LossReason
		done    <-chan result[struct{}]
	}
	newRun := func(what string) *run {
		return &run{what: what, terms: make(chan term, 4), reasons: make(chan zkgate.LossReason, 4)}
	}
	holding := func(r *run, endpoint string, token uint64, fctx context.Context, reason func() zkgate.LossReason) error {
		r.terms <- term{endpoint, token}
		<-fctx.Done()
		r.reasons <- reason()
		return nil
	}
	leader, holder := newRun("leader"), newRun("lock holder")
	leader.done = async(func() (struct{}, error) {
		return struct{}{}, c.RunWhileLeader(ctx, name, "f", nil, func(fctx context.Context, l *zkgate.Leadership) error {
			return holding(leader, l.Endpoint(), l.FencingToken(), fctx, l.Reason)
		})
	})
	holder.done = async(func() (struct{}, error) {
		return struct{}{}, c.RunWhileHolding(ctx, name+"-lock", func(fctx context.Context, l *zkgate.Lock) error {
			return holding(holder, l.Endpoint(), l.FencingToken(), fctx, l.Reason)
		})
	})
	nextTerm := func(r *run, within time.Duration) term {
		t.Helper()
		select {
		case tm := <-r.terms:
			return tm
		case <-time.After(within):
			t.Fatalf("the %s did not hold (again)", r.what)
		}
		panic("unreachable")
	}
	firsts := map[*run]term{}
	for _, r := range []*run{leader, holder} {
		firsts[r] = nextTerm(r, wait)
		if firsts[r].endpoint != victim {
			t.Fatalf("the %s holds on %s, want %s (the first endpoint)", r.what, firsts[r].endpoint, victim)
		}
	}
	obs := observer.Observe(ctx, name)
	var seen uint64
	observe := func(until func(zkgate.Leader) bool) {
		t.Helper()
		for {
			select {
			case l := <-obs:
				if !l.Vacant() {
					if l.FencingToken < seen {
						t.Fatalf("observed token %d after %d", l.FencingToken, seen)
					}
					seen = l.FencingToken
				}
				if until(l) {
					return
				}
			case <-time.After(wait):
				t.Fatal("observer stalled")
			}
		}
	}
	observe(func(l zkgate.Leader) bool { return l.FencingToken == firsts[leader].token })

	hurt()
	start := time.Now()
	for _, r := range []*run{leader, holder} {
		select {
		case reason := <-r.reasons:
			if reason != want {
				t.Fatalf("the %s's loss reason is %q, want %q", r.what, reason, want)
			}
		case <-time.After(wait):
			t.Fatalf("the %s saw no loss after the gateway went away", r.what)
		}
	}
	seconds := map[*run]term{}
	for _, r := range []*run{leader, holder} {
		second := nextTerm(r, bound+wait)
		took := time.Since(start)
		t.Logf("the %s holds again on %s %v after the gateway went away", r.what, second.endpoint, took)
		if second.endpoint != main || second.token <= firsts[r].token {
			t.Fatalf("the %s's second term on %s token %d (first %d)", r.what, second.endpoint, second.token, firsts[r].token)
		}
		if took > bound {
			t.Fatalf("the %s held again after %v, bound %v", r.what, took, bound)
		}
		seconds[r] = second
	}
	observe(func(l zkgate.Leader) bool { return l.FencingToken == seconds[leader].token })
	cancel()
	<-leader.done
	<-holder.done
}

func TestFailoverFromDrainedGateway(t *testing.T) {
	main, _ := gateway(t, "")
	victim, pid := gateway(t, "DRAIN_")
	// A drain revokes each hold with `suspended` first (G3c); the helper ends its stream on it,
	// so the znode goes at once: the bound is the backoff plus a new campaign.
	failover(t, victim, main, func() {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}, zkgate.LossSuspended, 3*time.Second)
}

func TestFailoverFromKilledGateway(t *testing.T) {
	main, _ := gateway(t, "")
	victim, pid := gateway(t, "KILL_")
	// The killed gateway's znode lives until its session expires (T), then the successor is
	// elected within a second (G6); plus the client's backoff.
	failover(t, victim, main, func() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}, zkgate.LossUnavailable, sessionTimeout(t)+3*time.Second)
}

// suspended: when the gateway loses ZooKeeper (here: ZooKeeper frozen), it tells its leaders
// and holders at once, and the helper gives the hold up with reason "suspended". Once
// ZooKeeper is back, the given-up znodes are gone.
func TestSuspendedWhenTheGatewayLosesZooKeeper(t *testing.T) {
	addr, _ := gateway(t, "")
	zkPid, err := strconv.Atoi(os.Getenv("ZKGATE_ZK_PID"))
	if err != nil {
		t.Fatalf("ZKGATE_ZK_PID: %v", err)
	}
	c := newClient(t, addr)
	ctx := context.Background()
	name := uniqueName(t)
	l, err := c.Campaign(ctx, name, "suspended", nil)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := c.Lock(ctx, name+"-lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(zkPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(zkPid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	waitClosed(t, "the leader's loss", l.Done())
	waitClosed(t, "the lock holder's loss", lk.Done())
	thaw()
	if l.Reason() != zkgate.LossSuspended || lk.Reason() != zkgate.LossSuspended {
		t.Fatalf("loss reasons %q and %q, want suspended", l.Reason(), lk.Reason())
	}
	waitFor(t, "the given-up leadership gone", func() bool {
		_, err := c.Leader(ctx, name)
		return errors.Is(err, zkgate.ErrNoLeader)
	})
	waitFor(t, "the given-up lock gone", func() bool {
		h, w, err := c.Holders(ctx, name+"-lock")
		return err == nil && len(h) == 0 && w == 0
	})
}

// The watchdog: a frozen gateway answers no ping, and a leader and a lock holder on it count as
// lost (reason "silence") within silence_limit of sending the last ping it answered, at most
// silence_limit/4 before the freeze (a holder pings every quarter of it; with an older gateway:
// of the last message, heartbeats every third).
func TestWatchdogOnAFrozenGateway(t *testing.T) {
	addr, pid := gateway(t, "")
	if pid == 0 {
		t.Fatal("ZKGATE_PID not set")
	}
	c := newClient(t, addr)
	ctx := context.Background()
	l, err := c.Campaign(ctx, uniqueName(t), "frozen", nil)
	if err != nil {
		t.Fatal(err)
	}
	lk, err := c.Lock(ctx, uniqueName(t)+"-lock")
	if err != nil {
		t.Fatal(err)
	}
	silence := l.SilenceLimit()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	frozen := time.Now()
	const slack = 500 * time.Millisecond
	for _, h := range []struct {
		what string
		done <-chan struct{}
		why  func() zkgate.LossReason
	}{{"leader", l.Done(), l.Reason}, {"lock holder", lk.Done(), lk.Reason}} {
		select {
		case <-h.done:
		case <-time.After(silence + slack + time.Second):
			t.Fatalf("the %s did not notice the frozen gateway", h.what)
		}
		took := time.Since(frozen)
		t.Logf("%s lost %v after the freeze (silence_limit %v)", h.what, took, silence)
		if h.why() != zkgate.LossSilence {
			t.Fatalf("the %s's loss reason is %q, want silence", h.what, h.why())
		}
		if took > silence+slack {
			t.Fatalf("the %s noticed after %v, bound silence_limit %v + %v", h.what, took, silence, slack)
		}
	}
}

// Observers the application does not read cost nothing else on their connection: each
// observer's goroutine waits to hand its state over, its stream stops being read, and gRPC's
// per-stream flow control holds that stream alone. (The Rust client had to read on instead: its
// transport, h2, ends the whole connection once ≈ 13,000 small messages wait unread; see
// clients/CONFORMANCE.md.) 200 unread observers and 120 proclaims are ≈ 24,000 messages.
func TestUnreadObserversDoNotCostTheLeadership(t *testing.T) {
	addr, _ := gateway(t, "")
	c := newClient(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueName(t)
	a, err := c.Campaign(ctx, name, "a", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	observers := make([]<-chan zkgate.Leader, 200)
	for i := range observers {
		observers[i] = c.Observe(ctx, name)
		select {
		case l := <-observers[i]:
			if l.Candidate != "a" {
				t.Fatalf("observer %d: first state %+v", i, l)
			}
		case <-time.After(wait):
			t.Fatalf("observer %d: no first state", i)
		}
	}
	for i := 0; i < 120; i++ {
		if err := a.Proclaim(ctx, []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatalf("proclaim %d: %v", i, err)
		}
	}
	select {
	case <-a.Done():
		t.Fatalf("the leadership ended: %v", a.Err())
	default:
	}
	// Read at last: every observer still follows, to the newest value.
	for i, obs := range observers {
		for {
			select {
			case l, ok := <-obs:
				if !ok {
					t.Fatalf("observer %d closed", i)
				}
				if string(l.Value) != "v119" {
					continue
				}
			case <-time.After(wait):
				t.Fatalf("observer %d never reached the newest value", i)
			}
			break
		}
	}
	_ = a.Resign(ctx)
}
