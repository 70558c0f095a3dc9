//! The `observe` workload's observers read by a minimal HTTP/2 client: it opens `Observe`
//! streams on one connection and reads their DATA frames straight off the socket.
//!
//! Why not tonic: the 10,000 observers stand for clients on other machines, each with its own
//! CPU, yet this process reads all of them on the 2 cores the gateway runs on. Read through
//! tonic and h2 (a task woken per stream, its body layers, the stream's lock and lookup, a
//! decoder per message) that cost 44–48 ms of CPU per leader change against the gateway's
//! 55–70 ms (`--observe-reader grpc` still measures it), so the wall time said as much about
//! the reader as about the gateway. Here one task per connection parses frames as they come
//! and counts each stream's message where it lies in the read buffer.
//!
//! It speaks just enough HTTP/2 for that and fails loudly on the rest: it announces windows
//! large enough that it never has to send WINDOW_UPDATE, acknowledges the gateway's SETTINGS
//! and keepalive PINGs, and treats a stream's end (trailers, RST_STREAM) or a GOAWAY as an
//! observer lost, which the workload then reports as an observer that missed a change. The
//! request headers are HPACK literals without indexing; the gateway's header blocks are
//! skipped, never decoded (nothing here reads a header, so no HPACK table is needed).

use std::net::SocketAddr;

use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const MAX_WINDOW: u32 = 0x7fff_ffff;

/// Appends one frame.
fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK "literal header field without indexing, new name", without Huffman coding.
fn literal(out: &mut Vec<u8>, name: &str, value: &str) {
    for s in [name, value] {
        assert!(s.len() < 127, "a header longer than one length byte");
        out.push(s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }
}

fn header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    literal(out, name, value);
}

/// What one connection's reader hands the workload.
pub trait Observers: Send + 'static {
    /// Stream `index` (0-based on this connection) has its first message: it is observing.
    fn ready(&mut self, index: usize);
    /// `count` messages naming the leader with `token` were read at one instant.
    fn saw(&mut self, token: u64, count: usize);
}

/// Opens `n` `Observe` streams on `election` over one new connection to `addr` and reads them
/// until the connection ends; returns why it ended. Every message is reported to `to`.
pub async fn observe(
    addr: SocketAddr,
    election: &str,
    n: usize,
    mut to: impl Observers,
) -> std::io::Result<String> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let mut out = Vec::with_capacity(64 * 1024);
    out.extend_from_slice(PREFACE);
    // SETTINGS_ENABLE_PUSH = 0, SETTINGS_INITIAL_WINDOW_SIZE = 2^31 - 1: no stream ever runs
    // out of window, so this client never sends WINDOW_UPDATE for one.
    let mut settings = Vec::new();
    settings.extend_from_slice(&2u16.to_be_bytes());
    settings.extend_from_slice(&0u32.to_be_bytes());
    settings.extend_from_slice(&4u16.to_be_bytes());
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    frame(&mut out, SETTINGS, 0, 0, &settings);
    // The connection's window from its initial 65,535 bytes to the most there is.
    frame(
        &mut out,
        WINDOW_UPDATE,
        0,
        0,
        &(MAX_WINDOW - 65_535).to_be_bytes(),
    );
    let mut block = Vec::new();
    block.push(0x83); // :method POST (static table 3)
    block.push(0x86); // :scheme http (static table 6)
    header(&mut block, ":path", "/zkgate.v1.Election/Observe");
    header(&mut block, ":authority", &addr.to_string());
    header(&mut block, "content-type", "application/grpc");
    header(&mut block, "te", "trailers");
    let request = zkgate::proto::ObserveRequest {
        election: election.into(),
    }
    .encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&(request.len() as u32).to_be_bytes());
    body.extend_from_slice(&request);
    for i in 0..n {
        let id = stream_id(i);
        frame(&mut out, HEADERS, END_HEADERS, id, &block);
        frame(&mut out, DATA, END_STREAM, id, &body);
    }
    tcp.write_all(&out).await?;
    out.clear();

    // Per stream: bytes of a message split across DATA frames, and whether it has had one.
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut started = vec![false; n];
    let mut buf = Vec::with_capacity(256 * 1024);
    let mut filled = 0;
    loop {
        if buf.len() - filled < 64 * 1024 {
            buf.resize(filled + 128 * 1024, 0);
        }
        let read = tcp.read(&mut buf[filled..]).await?;
        if read == 0 {
            return Ok("the gateway closed the connection".into());
        }
        filled += read;
        // Messages read at this instant, by token, reported once per token.
        let mut seen: Vec<(u64, usize)> = Vec::new();
        let mut at = 0;
        while filled - at >= 9 {
            let h = &buf[at..at + 9];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if filled - at < 9 + len {
                break;
            }
            let (kind, flags) = (h[3], h[4]);
            let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_WINDOW;
            let payload = &buf[at + 9..at + 9 + len];
            at += 9 + len;
            match kind {
                DATA => {
                    let Some(i) = stream_index(id, n) else {
                        return Ok(format!(
                            "DATA on stream {id}, which this client never opened"
                        ));
                    };
                    let mut data = payload;
                    if flags & PADDED != 0 {
                        let pad = *data.first().unwrap_or(&0) as usize;
                        if pad + 1 > data.len() {
                            return Ok(format!("a DATA frame padded past its end on {id}"));
                        }
                        data = &data[1..data.len() - pad];
                    }
                    let p = &mut partial[i];
                    let whole: &[u8] = if p.is_empty() {
                        data
                    } else {
                        p.extend_from_slice(data);
                        p
                    };
                    let used = messages(whole, |token| {
                        if !started[i] {
                            started[i] = true;
                            to.ready(i);
                        }
                        if let Some(token) = token {
                            match seen.iter_mut().find(|(t, _)| *t == token) {
                                Some((_, c)) => *c += 1,
                                None => seen.push((token, 1)),
                            }
                        }
                    })?;
                    let rest = whole[used..].to_vec();
                    *p = rest;
                    if flags & END_STREAM != 0 {
                        return Ok(format!("observer {i} ended (END_STREAM on DATA)"));
                    }
                }
                HEADERS if flags & END_STREAM != 0 => {
                    return Ok(format!("observer {} ended (trailers)", id / 2));
                }
                RST_STREAM => return Ok(format!("observer {} was reset", id / 2)),
                GOAWAY => return Ok("the gateway sent GOAWAY".into()),
                SETTINGS if flags & ACK == 0 => frame(&mut out, SETTINGS, ACK, 0, &[]),
                PING if flags & ACK == 0 => frame(&mut out, PING, ACK, 0, payload),
                // Response headers, CONTINUATION, WINDOW_UPDATE, PRIORITY, acks: nothing to do.
                _ => {}
            }
        }
        buf.copy_within(at..filled, 0);
        filled -= at;
        for (token, count) in seen {
            to.saw(token, count);
        }
        if !out.is_empty() {
            tcp.write_all(&out).await?;
            out.clear();
        }
    }
}

/// Client streams are odd: the `i`-th is `2i + 1`.
fn stream_id(i: usize) -> u32 {
    2 * i as u32 + 1
}

fn stream_index(id: u32, n: usize) -> Option<usize> {
    let i = (id.checked_sub(1)? / 2) as usize;
    (id % 2 == 1 && i < n).then_some(i)
}

/// An `ObserveResponse` as the fan-out's observers read it: the leader's fencing token, the
/// one field the benchmark looks at. The gateway sends every field (the same bytes to every
/// observer); prost skips the rest without copying the strings into a message per observer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObservedToken {
    #[prost(message, optional, tag = "1")]
    pub leader: Option<LeaderToken>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LeaderToken {
    #[prost(uint64, tag = "4")]
    pub fencing_token: u64,
}

/// Calls `each` with every whole gRPC message's leader token (`None`: no leader) in `bytes`;
/// returns how many bytes those messages took.
fn messages(bytes: &[u8], mut each: impl FnMut(Option<u64>)) -> std::io::Result<usize> {
    let mut at = 0;
    while bytes.len() - at >= 5 {
        if bytes[at] != 0 {
            return Err(std::io::Error::other("a compressed gRPC message"));
        }
        let len = u32::from_be_bytes([bytes[at + 1], bytes[at + 2], bytes[at + 3], bytes[at + 4]]);
        let end = at + 5 + len as usize;
        if end > bytes.len() {
            break;
        }
        let m = ObservedToken::decode(&bytes[at + 5..end]).map_err(std::io::Error::other)?;
        each(m.leader.map(|l| l.fencing_token));
        at = end;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc(token: Option<u64>) -> Vec<u8> {
        let m = ObservedToken {
            leader: token.map(|fencing_token| LeaderToken { fencing_token }),
        }
        .encode_to_vec();
        let mut v = vec![0];
        v.extend_from_slice(&(m.len() as u32).to_be_bytes());
        v.extend_from_slice(&m);
        v
    }

    #[test]
    fn whole_messages_are_read_and_a_partial_one_is_left() {
        let mut bytes = grpc(Some(7));
        bytes.extend(grpc(None));
        let whole = bytes.len();
        let third = grpc(Some(9));
        bytes.extend_from_slice(&third[..4]);
        let mut got = Vec::new();
        assert_eq!(messages(&bytes, |t| got.push(t)).unwrap(), whole);
        assert_eq!(got, [Some(7), None]);
    }

    #[test]
    fn stream_ids_are_odd_and_bounded() {
        assert_eq!(stream_id(0), 1);
        assert_eq!(stream_index(stream_id(999), 1000), Some(999));
        assert_eq!(stream_index(2, 1000), None);
        assert_eq!(stream_index(stream_id(1000), 1000), None);
        assert_eq!(stream_index(0, 1000), None);
    }
}
