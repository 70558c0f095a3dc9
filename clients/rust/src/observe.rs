//! `Observe` as a stream that survives its gateway: on a failure it reconnects (next endpoint,
//! backoff), and it never delivers a fencing token lower than one it already delivered — a
//! reconnect's first message comes from another gateway and may be older than what was seen.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::transport::Channel;
use tonic::Status;

use crate::backoff::Backoff;
use crate::hold::is_transport_failure;
use crate::mailbox::{self, Supersede};
use crate::pb::election_client::ElectionClient;
use crate::pb::{Leader, ObserveRequest, ObserveResponse};
use crate::{Client, Error};

/// The leader of an election (`None`: vacant) now and after every change. Items are `Err`
/// only for a refusal that reconnecting cannot fix (a bad name); the stream then ends.
/// Dropping it stops observing.
///
/// Observe streams carry no heartbeats: on a frozen gateway (SIGSTOP) the stream just goes
/// quiet until the connection fails.
pub struct Observer {
    rx: mailbox::Receiver<Option<Leader>>,
    _stop: DropGuard,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Stream for Observer {
    type Item = Result<Option<Leader>, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

/// What was last delivered, to keep tokens from going down across reconnects.
#[derive(Debug, Default)]
pub(crate) struct TokenFilter {
    highest: Option<u64>,
    last: Option<Option<(u64, String, Vec<u8>)>>,
}

impl TokenFilter {
    /// Whether to deliver `leader`. `first_after_reconnect`: the first message of a new
    /// stream, which repeats the current state (suppressed when unchanged).
    pub(crate) fn admit(&mut self, leader: Option<&Leader>, first_after_reconnect: bool) -> bool {
        let key = leader.map(|l| (l.fencing_token, l.candidate.clone(), l.value.clone()));
        if let (Some(l), Some(h)) = (leader, self.highest) {
            if l.fencing_token < h {
                return false;
            }
        }
        if first_after_reconnect && self.last.as_ref() == Some(&key) {
            return false;
        }
        if let Some(l) = leader {
            self.highest = Some(
                self.highest
                    .map_or(l.fencing_token, |h| h.max(l.fencing_token)),
            );
        }
        self.last = Some(key);
        true
    }
}

/// A newer leader state makes an older one nobody has taken yet pointless (states, not a log,
/// as the gateway's own `Observe`): an observer read late gets the newest.
impl Supersede for Option<Leader> {
    fn supersedes(&self, _older: &Self) -> bool {
        true
    }
}

pub(crate) fn start(client: Client, election: String) -> Observer {
    let (tx, rx) = mailbox::mailbox();
    let stop = CancellationToken::new();
    tokio::spawn(run(client, election, tx, stop.clone()));
    Observer {
        rx,
        _stop: stop.drop_guard(),
    }
}

async fn run(
    client: Client,
    election: String,
    tx: mailbox::Sender<Option<Leader>>,
    stop: CancellationToken,
) {
    let opener = client.clone();
    let open = move |ch| {
        let req = opener.authorized(ObserveRequest {
            election: election.clone(),
        });
        async move { ElectionClient::new(ch).observe(req).await }
    };
    follow(client, "observe", LeaderFollower::default(), tx, stop, open).await;
}

/// `Observe`'s messages as the observer delivers them: tokens never go down
/// ([`TokenFilter`]), and a reconnect's repeat of an unchanged leader is not delivered again.
#[derive(Debug, Default)]
struct LeaderFollower {
    filter: TokenFilter,
    /// A message came on some stream already: the next stream's first one is a repeat.
    connected_before: bool,
    first: bool,
}

impl Follower for LeaderFollower {
    type Msg = ObserveResponse;
    type Item = Option<Leader>;

    fn reconnected(&mut self) {
        self.first = self.connected_before;
    }

    fn admit(&mut self, msg: ObserveResponse) -> Vec<Option<Leader>> {
        self.connected_before = true;
        let deliver = self.filter.admit(msg.leader.as_ref(), self.first);
        self.first = false;
        if deliver {
            vec![msg.leader]
        } else {
            Vec::new()
        }
    }
}

/// What an observer makes of its stream's messages ([`follow`]).
pub(crate) trait Follower {
    type Msg;
    type Item;
    /// A new stream is open: after a reconnect its first messages repeat the current state.
    fn reconnected(&mut self);
    /// What to deliver for `msg`, in order.
    fn admit(&mut self, msg: Self::Msg) -> Vec<Self::Item>;
}

/// The observers' one reconnect loop (`Observe` and `ObserveMany`): opens the stream with
/// `open` on the current endpoint within the client's deadline, delivers what `follower`
/// admits, and after an end, a transport failure or a refusal that may pass, fails over to
/// the next endpoint after a backoff (reset by every message). A refusal that reconnecting
/// cannot fix is delivered as the last item. Returns when `stop` is cancelled or nobody
/// receives any more.
pub(crate) async fn follow<F, Open, Fut>(
    client: Client,
    what: &'static str,
    mut follower: F,
    tx: mailbox::Sender<F::Item>,
    stop: CancellationToken,
    mut open: Open,
) where
    F: Follower,
    F::Item: Supersede,
    Open: FnMut(Channel) -> Fut,
    Fut: Future<Output = Result<tonic::Response<tonic::Streaming<F::Msg>>, Status>>,
{
    let mut backoff = Backoff::default();
    loop {
        let i = client.current();
        let (ch, ep) = client.channel(i);
        let opened = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            r = tokio::time::timeout(client.timeout(), open(ch)) => r,
        };
        match opened {
            Ok(Ok(resp)) => {
                let mut s = resp.into_inner();
                follower.reconnected();
                loop {
                    let m = tokio::select! {
                        biased;
                        () = stop.cancelled() => return,
                        m = s.message() => m,
                    };
                    match m {
                        Ok(Some(msg)) => {
                            backoff.reset();
                            for item in follower.admit(msg) {
                                if !tx.put(Ok(item)) {
                                    return;
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(status) if is_transport_failure(&status) => {
                            tracing::debug!(endpoint = %ep, %status, "{what}: reconnecting");
                            break;
                        }
                        Err(status) => {
                            let e = Error::Status(status);
                            if e.is_permanent() {
                                tx.put(Err(e));
                                return;
                            }
                            break;
                        }
                    }
                }
            }
            Ok(Err(status)) if !is_transport_failure(&status) => {
                let e = Error::Status(status);
                if e.is_permanent() {
                    tx.put(Err(e));
                    return;
                }
            }
            Ok(Err(_)) | Err(_) => {}
        }
        client.fail_over_after(i);
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(token: u64, value: &str) -> Leader {
        Leader {
            fencing_token: token,
            candidate: "c".into(),
            value: value.into(),
            ..Default::default()
        }
    }

    #[test]
    fn tokens_never_go_down_across_reconnects() {
        let mut f = TokenFilter::default();
        assert!(f.admit(None, false), "the first state, vacant");
        assert!(f.admit(Some(&l(10, "a")), false));
        assert!(f.admit(Some(&l(10, "b")), false), "a proclaim: same token");
        assert!(f.admit(None, false), "a vacancy");
        assert!(f.admit(Some(&l(12, "x")), false));
        // Reconnected to a gateway that lags: an older leader is not delivered…
        assert!(!f.admit(Some(&l(10, "b")), true));
        // …nor the same state again…
        assert!(!f.admit(Some(&l(12, "x")), true));
        // …but a newer one is, and so is a vacancy.
        assert!(f.admit(Some(&l(13, "y")), false));
        assert!(f.admit(None, true));
        assert!(
            !f.admit(Some(&l(12, "x")), false),
            "never lower, reconnect or not"
        );
        assert!(f.admit(Some(&l(13, "y")), false));
    }

    #[test]
    fn an_unchanged_state_after_a_reconnect_is_not_repeated() {
        let mut f = TokenFilter::default();
        assert!(f.admit(None, false));
        assert!(!f.admit(None, true));
        assert!(f.admit(Some(&l(5, "v")), false));
        assert!(!f.admit(Some(&l(5, "v")), true));
        assert!(
            f.admit(Some(&l(5, "w")), true),
            "proclaimed while disconnected"
        );
    }
}
