//! What a member znode stores. Protobuf (via prost) so it can grow fields compatibly.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeRecord {
    /// Candidate (elections) or owner (locks).
    #[prost(string, tag = "1")]
    pub participant: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    /// Milliseconds since the epoch at which this member was confirmed leader or holder by its
    /// own gateway; 0 while it waits. Written with the ownership check before `elected`, so
    /// every gateway agrees on `since`.
    #[prost(int64, tag = "3")]
    pub elected_at_ms: i64,
    /// Lock permits this member agreed to (0 for elections).
    #[prost(uint32, tag = "4")]
    pub permits: u32,
    /// Milliseconds since the epoch at which a `Resign`/`Release` by lease (on any gateway)
    /// asked for this member to end; 0 if nobody did. A by-lease end is not the holder's own
    /// word on its stream, so the gateway serving the stream ends it by the G3c path (the
    /// holder told `suspended` first, the znode deleted once its stream ends or its silence
    /// limit passed): the requesting gateway writes this mark rather than deleting the znode,
    /// and waits for the znode to go (see `member::end_by_lease`).
    #[prost(int64, tag = "5")]
    pub end_requested_ms: i64,
}

impl NodeRecord {
    pub fn encode_to_vec(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }

    /// Foreign or corrupt data reads as an empty record rather than failing the whole queue.
    pub fn decode_lossy(bytes: &[u8]) -> Self {
        <Self as prost::Message>::decode(bytes).unwrap_or_default()
    }

    pub fn elected_at(&self) -> Option<SystemTime> {
        (self.elected_at_ms > 0)
            .then(|| UNIX_EPOCH + Duration::from_millis(self.elected_at_ms as u64))
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn ms_to_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// `since` for a holder this gateway did not see take office: the time its own gateway
/// recorded, if any (gateways before 0.2 wrote the confirmation time), else when it joined
/// the queue — a lower bound.
pub fn since(record: &NodeRecord, stat: &zookeeper_client::Stat) -> SystemTime {
    record
        .elected_at()
        .unwrap_or_else(|| ms_to_time(stat.ctime))
}

#[cfg(test)]
mod tests {
    use super::NodeRecord;

    /// The end-request mark rides in the record: a record written before it existed reads as
    /// "not requested", and a by-lease proclaim (decode, replace the value, encode) keeps it.
    #[test]
    fn the_end_request_mark_reads_as_absent_on_old_records_and_survives_a_proclaim() {
        let old = NodeRecord {
            participant: "a".into(),
            value: b"v".to_vec(),
            elected_at_ms: 5,
            permits: 1,
            ..Default::default()
        };
        // What a gateway without the field wrote: fields 1–4 only.
        let bytes = old.encode_to_vec();
        assert_eq!(NodeRecord::decode_lossy(&bytes).end_requested_ms, 0);

        let mut marked = NodeRecord::decode_lossy(&bytes);
        marked.end_requested_ms = 1_700_000_000_000;
        let mut proclaimed = NodeRecord::decode_lossy(&marked.encode_to_vec());
        proclaimed.value = b"w".to_vec();
        let read = NodeRecord::decode_lossy(&proclaimed.encode_to_vec());
        assert_eq!(read.end_requested_ms, 1_700_000_000_000);
        assert_eq!(
            (read.participant.as_str(), read.value.as_slice()),
            ("a", &b"w"[..])
        );
    }
}
