package zkgate

import "time"

// The lease on the holder's own clock (contract G3b, the proto's Ping; clients/CONFORMANCE.md
// "The lease on the holder's own clock (pings)"): the pure rule a hold's stream follows with a
// gateway that answers pings.
//
// A watchdog that restarts whenever a message arrives can be stretched by a slow link: a
// heartbeat sent just before the gateway froze, arriving late, restarts it while ZooKeeper
// expires the session and elects a successor. Here the holder numbers its pings and remembers
// when it sent each; the gateway answers one only while its session vouches for the hold at
// least silence_limit past the moment it read it, and a grant names the newest ping it had
// read. So the deadline is the *send* time of the newest answered ping + silence_limit: before
// anyone else can be granted the hold, however late the answer arrives.

// pingsRemembered is how many unanswered pings a stream remembers. A waiter's pings are never
// answered (only the grant names one), so the oldest are forgotten: one that old could only
// anchor a lease already over.
const pingsRemembered = 64

type sentPing struct {
	seq uint64
	at  time.Time
}

// pingLease is the pings sent on one stream and the lease the answered ones give. It is used
// by the stream's reading goroutine alone.
type pingLease struct {
	sent    []sentPing // oldest first
	lastSeq uint64
	limit   time.Duration // the grant's silence limit
	until   time.Time     // the deadline once granted; zero before, or when nothing anchors it
}

// newPingLease is the lease of a stream whose first message (the join or acquire, ping_seq 1)
// was sent at firstSent.
func newPingLease(firstSent time.Time) *pingLease {
	return &pingLease{sent: []sentPing{{1, firstSent}}, lastSeq: 1}
}

// ping numbers the next ping, sent at now.
func (l *pingLease) ping(now time.Time) uint64 {
	l.lastSeq++
	if len(l.sent) == pingsRemembered {
		l.sent = append(l.sent[:0], l.sent[1:]...)
	}
	l.sent = append(l.sent, sentPing{l.lastSeq, now})
	return l.lastSeq
}

// take is when ping seq was sent (false if never sent or forgotten); it forgets seq and every
// older ping (answers come in order).
func (l *pingLease) take(seq uint64) (time.Time, bool) {
	var at time.Time
	found := false
	n := 0
	for _, p := range l.sent {
		if p.seq == seq {
			at, found = p.at, true
		}
		if p.seq <= seq {
			n++
		}
	}
	l.sent = append(l.sent[:0], l.sent[n:]...)
	return at, found
}

// granted records the grant: pingSeq is the newest ping the gateway had read, limit the
// grant's silence limit. It returns the deadline, or false when the grant names no ping this
// stream sent (0, unknown, forgotten) or carries no limit: nothing anchors the hold, which is
// then lost at once.
func (l *pingLease) granted(limit time.Duration, pingSeq uint64) (time.Time, bool) {
	l.limit = limit
	l.until = time.Time{}
	if at, ok := l.take(pingSeq); ok && limit > 0 {
		l.until = at.Add(limit)
	}
	return l.until, !l.until.IsZero()
}

// answered is heartbeat{seq}: the deadline, moved on if seq answers a ping sent later than the
// one that set it. Unsolicited (0), unknown, replayed or older answers move nothing.
func (l *pingLease) answered(seq uint64) time.Time {
	if seq == 0 || l.limit <= 0 {
		return l.until
	}
	if at, ok := l.take(seq); ok {
		if u := at.Add(l.limit); u.After(l.until) {
			l.until = u
		}
	}
	return l.until
}
