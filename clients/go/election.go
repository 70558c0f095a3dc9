package zkgate

import (
	"bytes"
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/zkgate/zkgate/clients/go/zkgatev1"
)

// ErrNoLeader is what Leader returns while nobody leads the election.
var ErrNoLeader = errors.New("zkgate: no leader")

// Leader is who leads an election. The zero Candidate means the election is vacant (Observe
// delivers vacancies too).
type Leader struct {
	Election  string
	Candidate string
	Value     []byte
	// FencingToken orders every leader of the election: a later one always has a larger
	// token. Pass it to services that fence writes.
	FencingToken uint64
	Since        time.Time
}

// Vacant tells whether nobody leads.
func (l Leader) Vacant() bool { return l.Candidate == "" }

func leaderFromPB(election string, p *pb.Leader) Leader {
	if p == nil {
		return Leader{Election: election}
	}
	l := Leader{Election: p.GetElection(), Candidate: p.GetCandidate(), Value: p.GetValue(), FencingToken: p.GetFencingToken()}
	if l.Election == "" {
		l.Election = election
	}
	if p.GetSince() != nil {
		l.Since = p.GetSince().AsTime()
	}
	return l
}

func sameLeader(a, b Leader) bool {
	return a.Candidate == b.Candidate && a.FencingToken == b.FencingToken && bytes.Equal(a.Value, b.Value)
}

// Leadership is a won election, held by one open Campaign stream. Stop leader-only work as soon
// as Done is closed.
type Leadership struct {
	s        *stream
	election string
}

// Done is closed when the leadership is over: lost (see Err and Reason) or resigned.
func (l *Leadership) Done() <-chan struct{} { return l.s.done }

// Err is nil while leading, a *LostError after a loss, ErrReleased after Resign.
func (l *Leadership) Err() error { return l.s.err() }

// Reason is why the leadership was lost, or "" (still leading, or resigned).
func (l *Leadership) Reason() LossReason { return l.s.reason() }

// FencingToken is this leader's token (the znode's creation zxid).
func (l *Leadership) FencingToken() uint64 { return l.s.fencingToken() }

// SilenceLimit is how long the leader's lease lasts past the send of its newest answered ping
// (with an older gateway: past the last message heard) before it counts as lost.
func (l *Leadership) SilenceLimit() time.Duration { return l.s.silenceLimit() }

// Endpoint is the gateway holding the leadership, as configured.
func (l *Leadership) Endpoint() string { return l.s.endpoint }

// Lease is the capability to resign or proclaim from any gateway (Client.ResignLease). It is a
// secret: do not log it.
func (l *Leadership) Lease() string { return l.s.getLease() }

// Leader is the leader as last elected or proclaimed.
func (l *Leadership) Leader() Leader {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return leaderFromPB(l.election, l.s.leader)
}

// Proclaim replaces the leader's value without a new election (the unary Proclaim by lease, on
// the leadership's gateway). FAILED_PRECONDITION when no longer leader.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	if err := l.Err(); err != nil {
		return err
	}
	conn, err := l.s.c.conn(l.s.epIdx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, l.s.c.cfg.callTimeout)
	defer cancel()
	resp, err := pb.NewElectionClient(conn).Proclaim(ctx, &pb.ProclaimRequest{Lease: l.Lease(), Value: value})
	if err != nil {
		return err
	}
	l.s.mu.Lock()
	if resp.GetLeader() != nil {
		l.s.leader = resp.GetLeader()
	}
	l.s.mu.Unlock()
	return nil
}

// Resign leaves the election: it sends resign{} and waits (up to the call timeout or ctx) until
// the gateway has deleted the znode, else cancels the stream, which also deletes it. After a
// loss it only makes sure the stream is cancelled. Done is closed afterwards.
func (l *Leadership) Resign(ctx context.Context) error { return l.s.leave(ctx) }

type campaignRPC struct{ st pb.Election_CampaignClient }

func (r campaignRPC) recv() (event, error) {
	m, err := r.st.Recv()
	if err != nil {
		return event{}, err
	}
	switch e := m.GetEvent().(type) {
	case *pb.CampaignResponse_Queued:
		return queuedEvent(e.Queued), nil
	case *pb.CampaignResponse_Elected:
		return event{kind: evGranted, leader: e.Elected.GetLeader(), token: e.Elected.GetLeader().GetFencingToken(),
			silence: e.Elected.GetSilenceLimit().AsDuration(), pingSeq: e.Elected.GetPingSeq()}, nil
	case *pb.CampaignResponse_Suspended:
		return event{kind: evSuspended, stopWithin: e.Suspended.GetStopWithin().AsDuration(),
			endRequested: e.Suspended.GetReason() == pb.SuspendReason_SUSPEND_REASON_END_REQUESTED}, nil
	case *pb.CampaignResponse_Resumed:
		return event{kind: evResumed}, nil
	case *pb.CampaignResponse_Proclaimed:
		return event{kind: evProclaimed, leader: e.Proclaimed.GetLeader()}, nil
	case *pb.CampaignResponse_Heartbeat:
		return event{kind: evHeartbeat, seq: e.Heartbeat.GetSeq()}, nil
	}
	return event{kind: evOther}, nil
}

func (r campaignRPC) sendLeave() error {
	return r.st.Send(&pb.CampaignRequest{Request: &pb.CampaignRequest_Resign{Resign: &pb.ResignCandidacy{}}})
}

func (r campaignRPC) sendKeepAlive() error { return nil }

func (r campaignRPC) sendPing(seq uint64) error {
	return r.st.Send(&pb.CampaignRequest{Request: &pb.CampaignRequest_Ping{Ping: &pb.Ping{Seq: seq}}})
}

func openCampaign(name, candidate string, value []byte) func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error) {
	return func(ctx context.Context, conn *grpc.ClientConn) (holderRPC, error) {
		st, err := pb.NewElectionClient(conn).Campaign(ctx)
		if err != nil {
			return nil, err
		}
		join := &pb.CampaignRequest{Request: &pb.CampaignRequest_Join{Join: &pb.Join{Election: name, Candidate: candidate, Value: value,
			// The join is ping 1 (lease.go): openStream read its send time before.
			PingSeq: 1}}}
		if err := st.Send(join); err != nil {
			// The real cause comes with the stream's status.
			if _, rerr := st.Recv(); rerr != nil {
				return nil, rerr
			}
			return nil, err
		}
		return campaignRPC{st}, nil
	}
}

// Campaign joins election `name` as `candidate` with `value` and blocks until elected, like
// etcd's Election.Campaign. While waiting it fails over: a gateway that is unreachable, drains
// or fails moves it to the next endpoint (with backoff), so a standby keeps its turn across
// gateway failures as well as it can (a new stream queues at the back).
//
// Once elected, the returned Leadership lives until Resign or a loss (Done); cancelling ctx
// afterwards does not end it. A loss is not retried here: RunWhileLeader does that.
//
// # Errors
//
// ctx's error if ctx ends first (the candidacy is then given up); the gateway's status for a
// refused request (INVALID_ARGUMENT for a bad name, RESOURCE_EXHAUSTED, …).
func (c *Client) Campaign(ctx context.Context, name, candidate string, value []byte) (*Leadership, error) {
	return c.campaign(ctx, c.newBackoff(), name, candidate, value)
}

func (c *Client) campaign(ctx context.Context, b *backoffState, name, candidate string, value []byte) (*Leadership, error) {
	s, err := c.establish(ctx, b, openCampaign(name, candidate, value))
	if err != nil {
		return nil, err
	}
	return &Leadership{s: s, election: name}, nil
}

// RunOption configures RunWhileLeader and RunWhileHolding.
type RunOption func(*runConfig)

type runConfig struct{ requeue bool }

// WithRequeue turns auto-requeue on (the default) or off. Off, the first loss ends the run with
// its *LostError.
func WithRequeue(on bool) RunOption { return func(r *runConfig) { r.requeue = on } }

func runOptions(opts []RunOption) runConfig {
	r := runConfig{requeue: true}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// RunWhileLeader campaigns, and runs fn while this candidate leads: fn's context is cancelled
// the moment leadership is lost. fn must then return promptly; the run never calls fn twice
// at once. When fn returns while still leading, the run resigns and returns fn's error. After
// a loss it campaigns again (auto-requeue, on by default: a standby keeps standing by), on the
// next endpoint when the gateway failed or went silent, after backoff.
//
// It returns ctx's error once ctx ends (resigning first), fn's result when fn returns on its
// own, the *LostError of the first loss with WithRequeue(false), or a refusal from the
// gateway.
func (c *Client) RunWhileLeader(ctx context.Context, name, candidate string, value []byte,
	fn func(ctx context.Context, l *Leadership) error, opts ...RunOption) error {
	r := runOptions(opts)
	return c.runWhileHolding(ctx, r.requeue,
		func(ctx context.Context, b *backoffState) (*stream, error) {
			return c.establish(ctx, b, openCampaign(name, candidate, value))
		},
		func(ctx context.Context, s *stream) error { return fn(ctx, &Leadership{s: s, election: name}) })
}

// Leader returns the election's current leader, or ErrNoLeader.
func (c *Client) Leader(ctx context.Context, name string) (Leader, error) {
	var out Leader
	err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
		resp, err := pb.NewElectionClient(conn).Leader(ctx, &pb.LeaderRequest{Election: name})
		if err != nil {
			return err
		}
		out = leaderFromPB(name, resp.GetLeader())
		return nil
	})
	if status.Code(err) == codes.NotFound {
		return Leader{Election: name}, ErrNoLeader
	}
	return out, err
}

// ResignLease ends the candidacy that holds lease, from any gateway. Idempotent: a spent lease
// is NOT_FOUND.
func (c *Client) ResignLease(ctx context.Context, lease string) error {
	return c.unaryWithin(ctx, c.cfg.callTimeout+ByLeaseExtra, func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := pb.NewElectionClient(conn).Resign(ctx, &pb.ResignRequest{Lease: lease})
		return err
	})
}

// Candidate is one member of an election's queue.
type Candidate struct {
	Candidate    string
	Value        []byte
	Position     uint32
	FencingToken uint64
	Leader       bool
}

// Candidates lists the election's queue in order (all pages), for operators and tests.
func (c *Client) Candidates(ctx context.Context, name string) ([]Candidate, error) {
	var out []Candidate
	token := ""
	for {
		var resp *pb.CandidatesResponse
		err := c.unary(ctx, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			resp, err = pb.NewElectionClient(conn).Candidates(ctx, &pb.CandidatesRequest{Election: name, PageToken: token})
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, m := range resp.GetCandidates() {
			out = append(out, Candidate{Candidate: m.GetCandidate(), Value: m.GetValue(), Position: m.GetPosition(),
				FencingToken: m.GetFencingToken(), Leader: m.GetLeader()})
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// Observe follows the election's leader: the current state first (a Leader, or a vacant one),
// then one value per change, until ctx ends (then the channel is closed). It reconnects across
// endpoints when a gateway fails, and never delivers a fencing token lower than one it already
// delivered (a reconnect's first message may be older than what was seen); repeats after a
// reconnect are dropped. The channel is also closed if the gateway refuses the request (a bad
// name: Leader returns that error).
func (c *Client) Observe(ctx context.Context, name string) <-chan Leader {
	ch := make(chan Leader)
	go func() {
		defer close(ch)
		b := c.newBackoff()
		var maxToken uint64
		var last *Leader
		for ctx.Err() == nil {
			i := c.current()
			conn, err := c.conn(i)
			if err != nil {
				return
			}
			sctx, cancel := context.WithCancel(ctx)
			st, err := pb.NewElectionClient(conn).Observe(sctx, &pb.ObserveRequest{Election: name})
			for err == nil {
				var resp *pb.ObserveResponse
				if resp, err = st.Recv(); err != nil {
					break
				}
				b.reset()
				l := leaderFromPB(name, resp.GetLeader())
				if !l.Vacant() {
					if l.FencingToken < maxToken {
						continue
					}
					maxToken = l.FencingToken
				}
				if last != nil && sameLeader(*last, l) {
					continue
				}
				select {
				case ch <- l:
					last = &l
				case <-ctx.Done():
				}
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
				c.logf("zkgate: observe %s: %v", name, err)
				return
			case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
				c.logf("zkgate: observe %s on %s: %v", name, c.endpoints[i].name, err)
				c.advance(i)
			}
			if b.wait(ctx) != nil {
				return
			}
		}
	}()
	return ch
}

// ManyEvent is one value of ObserveMany: an election's state (Leader, vacant when its
// Candidate is empty), or, once, SnapshotComplete after the first state of every election.
type ManyEvent struct {
	Election         string
	Leader           Leader
	SnapshotComplete bool
}

// manyFilter keeps, per election, what ObserveMany delivered across reconnects.
type manyFilter struct {
	known     map[string]*manyKnown
	snapshot  map[string]bool // elections in the current stream's snapshot; nil once complete
	completed bool
}

type manyKnown struct {
	maxToken uint64
	last     *Leader
}

func (f *manyFilter) reconnected() { f.snapshot = map[string]bool{} }

// admit returns what to deliver for one message.
func (f *manyFilter) admit(resp *pb.ObserveManyResponse) []ManyEvent {
	if f.known == nil {
		f.known = map[string]*manyKnown{}
	}
	if resp.GetSnapshotComplete() != nil {
		var out []ManyEvent
		if f.snapshot != nil {
			for name, k := range f.known {
				if k.last != nil && !k.last.Vacant() && !f.snapshot[name] {
					v := Leader{Election: name}
					k.last = &v
					out = append(out, ManyEvent{Election: name, Leader: v})
				}
			}
		}
		f.snapshot = nil
		if !f.completed {
			f.completed = true
			out = append(out, ManyEvent{SnapshotComplete: true})
		}
		return out
	}
	st := resp.GetState()
	if st == nil {
		return nil
	}
	name := st.GetElection()
	l := leaderFromPB(name, st.GetLeader())
	first := f.snapshot != nil && !f.snapshot[name]
	if f.snapshot != nil {
		f.snapshot[name] = true
	}
	k := f.known[name]
	if k == nil {
		k = &manyKnown{}
		f.known[name] = k
	}
	if !l.Vacant() && l.FencingToken < k.maxToken {
		return nil
	}
	if first && k.last != nil && sameLeader(*k.last, l) {
		return nil
	}
	if !l.Vacant() {
		k.maxToken = l.FencingToken
	}
	k.last = &l
	return []ManyEvent{{Election: name, Leader: l}}
}

// ObserveMany follows every election whose name starts with prefix (elections created later
// included) plus every name in elections: one ManyEvent per election first, then one with
// SnapshotComplete, then one per change, until ctx ends (then the channel is closed). It
// reconnects like Observe; per election it never delivers a lower fencing token than one it
// delivered nor repeats an unchanged state after a reconnect, and an election that led before a
// reconnect but is missing from the new snapshot is delivered vacant. The channel is also
// closed when the gateway refuses the request (a bad name, the elections-per-stream limit).
func (c *Client) ObserveMany(ctx context.Context, prefix string, elections []string) <-chan ManyEvent {
	ch := make(chan ManyEvent)
	go func() {
		defer close(ch)
		b := c.newBackoff()
		var f manyFilter
		for ctx.Err() == nil {
			i := c.current()
			conn, err := c.conn(i)
			if err != nil {
				return
			}
			sctx, cancel := context.WithCancel(ctx)
			st, err := pb.NewElectionClient(conn).ObserveMany(sctx, &pb.ObserveManyRequest{Prefix: prefix, Elections: elections})
			f.reconnected()
			for err == nil {
				var resp *pb.ObserveManyResponse
				if resp, err = st.Recv(); err != nil {
					break
				}
				b.reset()
				for _, e := range f.admit(resp) {
					select {
					case ch <- e:
					case <-ctx.Done():
					}
				}
			}
			cancel()
			if ctx.Err() != nil {
				return
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.ResourceExhausted:
				c.logf("zkgate: observe many %q: %v", prefix, err)
				return
			case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown, codes.Internal:
				c.logf("zkgate: observe many %q on %s: %v", prefix, c.endpoints[i].name, err)
				c.advance(i)
			}
			if b.wait(ctx) != nil {
				return
			}
		}
	}()
	return ch
}
