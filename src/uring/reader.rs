//! [`UringFramedReader`]: a connection's frames, from the views its receive completed.

use core::pin::Pin;
use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_core::Stream;

use super::driver::{Queue, Shared};
use super::frames::Assembler;
use super::lock;
use crate::io::{Decoder, Memory};
use crate::FixedBuf;

/// Frames of one connection received on a [`UringGroup`](super::UringGroup): a
/// [`Stream`](https://docs.rs/futures-core/0.3/futures_core/stream/trait.Stream.html)
/// of frames found by its [`Decoder`], as
/// [`AsyncFramedReader`](crate::io::AsyncFramedReader) yields them.
///
/// A frame wholly inside one completion is a [`FixedBuf`] slice of the provided buffer
/// the kernel received it into, with no copy; a frame that two or more completions carry
/// is copied into a region of its own bytes (from the group's [`ReadPool`](crate::io::ReadPool),
/// or the heap when that is full). Dropping the reader cancels its receive; the group
/// lets go of the connection's socket once the kernel has finished with it.
///
/// The reader lives in the task that polls it: an `async fn` that takes it as an
/// argument holds it twice (the argument and the local it moves into); made inside
/// the task, or moved into an `async move` block, it is there once.
///
/// ```no_run
/// # #![allow(dead_code)]
/// # async fn serve(group: ringmem::uring::UringGroup, conn: tokio::net::TcpStream) -> std::io::Result<()> {
/// use ringmem::io::LengthDelimited;
/// let mut frames = group.framed(&conn, LengthDelimited::new())?;
/// while let Some(frame) = frames.next_frame().await? {
///     println!("{} bytes", frame.len());
/// }
/// # Ok(()) }
/// ```
pub struct UringFramedReader<D> {
    shared: Arc<Shared>,
    queue: Arc<Mutex<Queue>>,
    id: u32,
    gen: u32,
    frames: Assembler<D>,
    mem: Memory,
    ended: bool,
    /// Bytes of frames yielded since the task last spent a unit of tokio's budget.
    owed: usize,
}

impl<D: Decoder> UringFramedReader<D> {
    pub(super) fn new(
        shared: Arc<Shared>,
        (id, gen, queue): (u32, u32, Arc<Mutex<Queue>>),
        decoder: D,
        mem: Memory,
    ) -> Self {
        shared.add_user();
        UringFramedReader {
            shared,
            queue,
            id,
            gen,
            frames: Assembler::new(decoder),
            mem,
            ended: false,
            owed: 0,
        }
    }

    /// The next frame; `Ok(None)` once the peer has closed the connection and every
    /// frame before that was yielded.
    ///
    /// # Errors
    /// A frame the decoder rejected (the stream goes on past it where the decoder can
    /// resynchronise), or the receive's error (the stream then ends).
    ///
    /// ```no_run
    /// # #![allow(dead_code)]
    /// # async fn f(mut frames: ringmem::uring::UringFramedReader<ringmem::io::Lines>) -> std::io::Result<()> {
    /// while let Some(line) = frames.next_frame().await? {
    ///     assert!(!line.contains(&b'\n'));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn next_frame(&mut self) -> io::Result<Option<FixedBuf>>
    where
        D: Unpin,
    {
        core::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx))
            .await
            .transpose()
    }

    /// Bytes received and not yet yielded in a frame (those the reader has taken from
    /// its connection's queue).
    ///
    /// ```no_run
    /// # #![allow(dead_code)]
    /// # fn f(frames: ringmem::uring::UringFramedReader<ringmem::io::Lines>) {
    /// assert_eq!(frames.buffered(), 0); // a reader that has not been polled
    /// # }
    /// ```
    pub fn buffered(&self) -> usize {
        self.frames.buffered()
    }

    /// The decoder.
    ///
    /// ```no_run
    /// # #![allow(dead_code)]
    /// # fn f(frames: ringmem::uring::UringFramedReader<ringmem::io::LengthDelimited>) {
    /// assert_eq!(frames.decoder().header_len(), 4);
    /// # }
    /// ```
    pub fn decoder(&self) -> &D {
        &self.frames.decoder
    }
}

impl<D: Decoder + Unpin> Stream for UringFramedReader<D> {
    type Item = io::Result<FixedBuf>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            match this.frames.next(&this.mem) {
                Ok(Some(frame)) => {
                    this.owed += frame.len();
                    return Poll::Ready(Some(Ok(frame)));
                }
                Err(e) => return Poll::Ready(Some(Err(e))),
                Ok(None) if this.frames.stopped() => {
                    this.ended = true;
                    continue;
                }
                Ok(None) => {}
            }
            if crate::io::spend_budget(&mut this.owed, cx).is_pending() {
                return Poll::Pending;
            }
            let mut q = lock(&this.queue);
            // One completion's bytes at a time: those left in the queue are the ones
            // the group may copy out when it runs short (a reader that stops reading
            // holds one completion's buffer, not its backlog's).
            if let Some(chunk) = q.chunks.pop_front() {
                (q.bytes, q.pinned) = (q.bytes - chunk.len(), false);
                q.taken = q.taken.wrapping_add(1);
                let resume = q.chunks.is_empty() && core::mem::take(&mut q.paused);
                drop(q);
                this.frames.push(chunk);
                if resume {
                    this.shared.resume(this.id, this.gen);
                }
                continue;
            }
            if let Some(end) = q.end.take() {
                drop(q);
                this.ended = true;
                return Poll::Ready(match end.and_then(|()| this.frames.finish()) {
                    Ok(frame) => frame.map(Ok),
                    Err(e) => {
                        this.frames.stop();
                        Some(Err(e))
                    }
                });
            }
            if core::mem::take(&mut q.paused) {
                drop(q);
                this.shared.resume(this.id, this.gen);
                continue;
            }
            // Nothing here yet: take the group's waiting completions if no one else is
            // (the driver's task would, a wake-up later), then look again.
            drop(q);
            if this.shared.try_reap() {
                continue;
            }
            let mut q = lock(&this.queue);
            if !q.chunks.is_empty() || q.end.is_some() || q.paused {
                continue;
            }
            if !q.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                q.waker = Some(cx.waker().clone());
            }
            // An idle connection holds no deque: the next completion takes one.
            if q.chunks.capacity() != 0 {
                super::frames::spare_deque(core::mem::take(&mut q.chunks));
            }
            // The start of a frame held as a view: kept while the next completion can
            // join it (the driver wakes the reader once it cannot), else copied out
            // so that it does not hold the buffer. Looked at under the queue's lock:
            // see `State::unpin`.
            match this.frames.held_view() {
                Some(true) => q.pinned = true,
                Some(false) => {
                    drop(q);
                    if this.frames.unpin(&this.mem)? {
                        continue;
                    }
                }
                None => {}
            }
            return Poll::Pending;
        }
    }
}

impl<D> Drop for UringFramedReader<D> {
    fn drop(&mut self) {
        self.shared.close(self.id, self.gen);
        self.shared.drop_user();
    }
}
