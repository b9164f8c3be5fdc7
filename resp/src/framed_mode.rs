//! `--memory framed`: the same server as a tokio user writes it without ringmem:
//! tokio_util's `FramedRead` over a `BytesMut` with a RESP codec (the same `Resp`
//! decoder), values as `Bytes` slices of the read buffer, replies encoded into a
//! `BytesMut` and written with `write_all`.

use std::io;
use std::ops::Range;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{FutureExt, StreamExt};
use ringmem::io::{Decode, Decoder as _, Resp};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::codec::{Decoder, FramedRead};

use crate::command::{execute, fmt_i64, Info, Replies, Then};
use crate::store::{Store, Value};
use crate::{protocol_error, ARGS_KEPT, HIGH_WATER};

/// Bytes a codec reserves ahead at most for a frame whose length it knows: a bulk
/// announced at 512 MiB gets its buffer as its bytes arrive, not up front.
const RESERVE_AHEAD: usize = 64 << 10;

/// RESP requests for `FramedRead`: each frame split off the buffer as `Bytes`.
#[derive(Debug)]
pub struct RespCodec(Resp);

impl Default for RespCodec {
    fn default() -> Self {
        RespCodec(Resp::requests())
    }
}

impl Decoder for RespCodec {
    type Item = Bytes;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Bytes>> {
        match self.0.decode(src)? {
            Decode::Frame(f) => {
                let frame = src.split_to(f.consumed).freeze();
                Ok(Some(frame.slice(f.start..f.end)))
            }
            Decode::Need(n) => {
                src.reserve((n - src.len()).min(RESERVE_AHEAD));
                Ok(None)
            }
        }
    }
}

impl Value for Bytes {
    type Frame = Bytes;

    fn keep(frame: &Bytes, range: Range<usize>) -> Self {
        frame.slice(range)
    }

    fn copy(bytes: &[u8]) -> Self {
        Bytes::copy_from_slice(bytes)
    }
}

/// Replies encoded into the connection's output buffer.
struct Out<'a>(&'a mut BytesMut);

impl Out<'_> {
    fn head(&mut self, kind: u8, n: i64) {
        let mut digits = [0; 20];
        self.0.put_u8(kind);
        self.0.put_slice(fmt_i64(n, &mut digits));
        self.0.put_slice(b"\r\n");
    }

    fn bulk_bytes(&mut self, bytes: &[u8]) {
        self.head(b'$', bytes.len() as i64);
        self.0.put_slice(bytes);
        self.0.put_slice(b"\r\n");
    }
}

impl Replies<Bytes> for Out<'_> {
    fn raw(&mut self, bytes: &'static [u8]) {
        self.0.put_slice(bytes);
    }

    fn error(&mut self, message: &str) {
        self.0.put_u8(b'-');
        self.0.put_slice(message.as_bytes());
        self.0.put_slice(b"\r\n");
    }

    fn int(&mut self, n: i64) {
        self.head(b':', n);
    }

    fn bulk(&mut self, value: &Bytes) {
        self.bulk_bytes(value);
    }

    fn bulk_arg(&mut self, frame: &Bytes, range: Range<usize>) {
        self.bulk_bytes(&frame[range]);
    }

    fn bulk_made(&mut self, bytes: &[u8]) {
        self.bulk_bytes(bytes);
    }

    fn array(&mut self, n: usize) {
        self.head(b'*', n as i64);
    }
}

fn info() -> Info {
    Info {
        mode: "framed",
        reader_waits: 0,
        pool_bytes_in_use: 0,
        extra: String::new(),
    }
}

/// Serves one connection until it closes, says `QUIT`, or breaks the protocol.
pub async fn serve(conn: TcpStream, store: Arc<Store<Bytes>>) -> io::Result<()> {
    let (rd, mut wr) = conn.into_split();
    let mut requests = FramedRead::new(rd, RespCodec::default());
    let mut out = BytesMut::new();
    let mut args: Vec<Range<usize>> = Vec::new();
    let mut next = requests.next().await;
    loop {
        let frame = match next {
            Some(Ok(frame)) => frame,
            None => break,
            Some(Err(e)) => {
                if let Some(line) = protocol_error(&e) {
                    out.put_slice(line.as_bytes());
                }
                break;
            }
        };
        args.clear();
        args.extend(Resp::args(&frame));
        let then = execute(&store, &frame, &args, &mut Out(&mut out), info);
        drop(frame);
        if args.capacity() > ARGS_KEPT {
            // A request of many arguments does not leave its room to an idle connection.
            args = Vec::new();
        }
        if then == Then::Close {
            break;
        }
        if out.len() >= HIGH_WATER {
            wr.write_all(&out).await?;
            out.clear();
        }
        // As the ringmem mode: the requests already read, then the replies.
        let read = (!requests.read_buffer().is_empty()).then(|| requests.next().now_or_never());
        next = match read.flatten() {
            Some(got) => got,
            None => {
                wr.write_all(&out).await?;
                out.clear();
                requests.next().await
            }
        };
    }
    wr.write_all(&out).await?;
    wr.shutdown().await
}
