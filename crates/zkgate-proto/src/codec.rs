//! The protobuf codec of the `zkgate.v1` services, with small per-call buffers.
//!
//! tonic gives every call an 8 KiB decode buffer and an 8 KiB encode buffer up front. zkgate's
//! messages are small (a candidate, a lease, a heartbeat; values are the exception and make a
//! buffer grow as needed), and a gateway holds tens of thousands of long-lived streams: the two
//! default buffers were ≈ 16 of the ≈ 23 KiB each open stream cost (`examples/scale_bench.rs`).
//! 512-byte buffers were then still ≈ 1 KiB of the ≈ 10 KiB a waiting stream cost at 100,000
//! streams (issue 21); 128 bytes holds the inbound join and a typical small message, and a
//! buffer grows at once to whatever one message needs (a decode reserves the message's length,
//! an encode grows as it writes), so only a stream that actually carries larger messages pays
//! for them.
//! The generated code uses this codec (`build.rs`, `codec_path`, in its own pass with only the
//! servers).

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial buffer per call and direction; buffers grow for larger messages.
const BUFFER: usize = 128;
/// tonic's default: how much a streaming encoder buffers before it yields.
const YIELD_THRESHOLD: usize = 32 * 1024;

/// [`ProstCodec`] with [`BUFFER`]-byte initial buffers.
#[derive(Debug, Clone)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::new(BUFFER, YIELD_THRESHOLD))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::new(BUFFER, YIELD_THRESHOLD))
    }
}
