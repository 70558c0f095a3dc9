//! A message encoded once and sent as it is to many streams.
//!
//! An `Observe` stream carries the same state to every observer of an election: at 10,000
//! observers, building and encoding that response per stream (the leader's strings copied
//! into a fresh message, then encoded, then dropped) was a tenth of the gateway's work per
//! leader change (issue 21). The gateway encodes each published state once and every stream
//! copies the encoded bytes into its frame. The server's `Observe` sends [`Encoded`] in place of
//! [`ObserveResponse`](crate::ObserveResponse) (`build.rs`); the wire format is the same, so
//! clients see no difference.

use std::fmt;
use std::marker::PhantomData;

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{DecodeContext, WireType};
use prost::{DecodeError, Message};

/// `M`, already encoded: sending it copies bytes, shared by reference count, not fields.
pub struct Encoded<M> {
    bytes: Bytes,
    _message: PhantomData<fn() -> M>,
}

impl<M: Message> Encoded<M> {
    /// Encodes `message` once.
    pub fn new(message: &M) -> Self {
        Self::from_bytes(Bytes::from(message.encode_to_vec()))
    }
}

impl<M> Encoded<M> {
    /// `bytes` that encode an `M`, such as [`Encoded::new`]'s or `M::encode_to_vec`'s: kept
    /// where many streams share them.
    pub fn from_bytes(bytes: Bytes) -> Self {
        Encoded {
            bytes,
            _message: PhantomData,
        }
    }
}

impl<M> From<Encoded<M>> for Bytes {
    fn from(e: Encoded<M>) -> Bytes {
        e.bytes
    }
}

impl<M> Clone for Encoded<M> {
    fn clone(&self) -> Self {
        Self::from_bytes(self.bytes.clone())
    }
}

impl<M> Default for Encoded<M> {
    /// The empty message: every field at its default.
    fn default() -> Self {
        Self::from_bytes(Bytes::new())
    }
}

impl<M> fmt::Debug for Encoded<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({} bytes)", self.bytes.len())
    }
}

impl<M: Message + Default> Message for Encoded<M> {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.bytes);
    }

    /// Decoding is never the server's business, but kept correct: the field is merged into the
    /// decoded message, which is encoded again.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let mut message = M::decode(self.bytes.clone())?;
        message.merge_field(tag, wire_type, buf, ctx)?;
        *self = Self::new(&message);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    fn clear(&mut self) {
        self.bytes = Bytes::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Leader, ObserveResponse};

    fn response() -> ObserveResponse {
        ObserveResponse {
            leader: Some(Leader {
                election: "e".into(),
                candidate: "c".into(),
                value: b"v".to_vec(),
                fencing_token: 42,
                since: None,
            }),
        }
    }

    #[test]
    fn sends_the_same_bytes_as_the_message_and_decodes_back() {
        let m = response();
        let e = Encoded::new(&m);
        assert_eq!(e.encoded_len(), m.encoded_len());
        assert_eq!(e.encode_to_vec(), m.encode_to_vec());
        let back = Encoded::<ObserveResponse>::decode(m.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            ObserveResponse::decode(back.encode_to_vec().as_slice()).unwrap(),
            m
        );
        assert_eq!(Encoded::<ObserveResponse>::default().encoded_len(), 0);
    }
}
