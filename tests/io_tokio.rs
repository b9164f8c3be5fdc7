//! The async framed reader on loopback TCP (feature `tokio`).

use std::future::poll_fn;
use std::io::ErrorKind;
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use ringmem::io::{AsyncFramedReader, FrameError, FramedWriter, LengthDelimited, Lines};
use ringmem::{FixedBuf, Ring};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn next<R: AsyncRead + Unpin, D: ringmem::io::Decoder + Unpin>(
    s: &mut AsyncFramedReader<R, D>,
) -> Option<std::io::Result<FixedBuf>> {
    poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = [0, 1, 64, 1000, 5000, 17_000][i % 6] + i % 7;
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        })
        .collect()
}

fn encode(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = FramedWriter::new(Vec::new(), LengthDelimited::new());
    for f in frames {
        w.write_frame(f).unwrap();
    }
    w.into_inner()
}

/// A connected loopback pair whose sending side writes `wire` in `chunk`-byte writes,
/// pausing now and then so reads end at many places, then closes.
async fn serve(wire: Vec<u8>, chunk: usize) -> TcpStream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        for (i, part) in wire.chunks(chunk).enumerate() {
            s.write_all(part).await.unwrap();
            if i % 16 == 0 {
                tokio::task::yield_now().await;
            }
        }
        s.shutdown().await.unwrap();
    });
    TcpStream::connect(addr).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_over_loopback_tcp() {
    let sent = frames(600);
    for chunk in [1 << 16, 4093, 100] {
        let conn = serve(encode(&sent), chunk).await;
        let mut reader = AsyncFramedReader::new(conn, LengthDelimited::new());
        let mut got = Vec::new();
        while let Some(f) = next(&mut reader).await {
            got.push(f.unwrap().to_vec());
        }
        assert_eq!(got, sent, "{chunk}-byte writes");
        assert_eq!(reader.ring().stats().live_buffers, 0);
    }
}

/// A ring smaller than what the consumer holds: the stream waits for releases made on
/// another task (and thread) instead of failing, and every frame arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ring_waits_for_the_consumer() {
    let sent = frames(300);
    let conn = serve(encode(&sent), 1 << 16).await;
    let mut reader =
        AsyncFramedReader::with_ring(conn, LengthDelimited::new(), Ring::new(128 << 10));
    let (tx, mut rx) = tokio::sync::mpsc::channel::<FixedBuf>(1000);
    let consumer = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(f) = rx.recv().await {
            tokio::time::sleep(Duration::from_micros(300)).await;
            got.push(f.to_vec());
        }
        got
    });
    while let Some(f) = next(&mut reader).await {
        tx.send(f.unwrap()).await.unwrap();
    }
    drop(tx);
    assert_eq!(consumer.await.unwrap(), sent);
}

#[tokio::test]
async fn bad_input_ends_the_stream_with_an_error() {
    // Lines over the maximum, then a frame cut by the peer's close.
    let conn = serve(b"short\nmuch too long for this\n".to_vec(), 7).await;
    let mut r = AsyncFramedReader::new(conn, Lines::with_max_length(10));
    assert_eq!(&next(&mut r).await.unwrap().unwrap()[..], b"short");
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert!(next(&mut r).await.is_none());
    assert_eq!(r.ring().stats().live_buffers, 0);

    let mut wire = encode(&[vec![1; 10], vec![2; 500]]);
    wire.truncate(wire.len() - 1);
    let conn = serve(wire, 64).await;
    let mut r = AsyncFramedReader::new(conn, LengthDelimited::new());
    assert_eq!(next(&mut r).await.unwrap().unwrap().len(), 10);
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert_eq!(*why, FrameError::Truncated { buffered: 503 });
    assert!(next(&mut r).await.is_none());
    assert_eq!(r.ring().stats().live_buffers, 0);
}

#[tokio::test]
async fn a_frame_larger_than_the_ring_is_invalid_data() {
    let c = LengthDelimited::new();
    let conn = serve(encode(&[vec![9; 200_000]]), 1 << 16).await;
    let mut r = AsyncFramedReader::with_ring(conn, c, Ring::new(1 << 16));
    let e = next(&mut r).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    let why = e.get_ref().unwrap().downcast_ref::<FrameError>().unwrap();
    assert!(matches!(
        why,
        FrameError::LargerThanRing {
            needed: 200_004,
            ..
        }
    ));
    assert!(next(&mut r).await.is_none());
}
