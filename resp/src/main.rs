//! `ringmem-resp --port N --memory ringmem|framed|uring [--budget-mib M] [--threads T]`: the
//! server of the `ringmem_resp` library (see its docs for how it reads requests and
//! where values live). Two environment variables move the ringmem mode's choice of
//! where values live, for measuring it: `RINGMEM_RESP_KEEP_PERCENT` (the share of the
//! pool values may take, 50 by default) and `RINGMEM_RESP_KEEP_MIN` (the shortest
//! value kept in the pool, 4 KiB by default). `uring` (Linux): the ringmem mode with
//! requests received by io_uring (`ringmem::uring`, a group of the budget's bytes; the
//! copies and the values' limit in a pool of the same budget).

use std::io::{self, Write as _};
use std::process::exit;
use std::sync::Arc;
use std::time::Duration;

use ringmem::io::ReadPool;
use ringmem_resp::{framed_mode, ringmem_mode, Store};
use tokio::net::TcpListener;

/// The server's settings, from the command line.
struct Args {
    port: u16,
    framed: bool,
    uring: bool,
    budget_mib: usize,
    threads: usize,
}

fn usage(why: &str) -> ! {
    eprintln!("ringmem-resp: {why}");
    eprintln!(
        "usage: ringmem-resp --port N --memory ringmem|framed|uring [--budget-mib M] [--threads T]"
    );
    exit(2);
}

fn parse() -> Args {
    let mut args = Args {
        port: 6379,
        framed: false,
        uring: false,
        budget_mib: 64,
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        let number = |v: String| -> usize {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {v}")))
        };
        match flag.as_str() {
            "--port" => {
                args.port =
                    u16::try_from(number(value())).unwrap_or_else(|_| usage("--port: out of range"))
            }
            "--memory" => {
                (args.framed, args.uring) = match value().as_str() {
                    "ringmem" => (false, false),
                    "framed" => (true, false),
                    "uring" => (false, true),
                    other => usage(&format!(
                        "--memory is ringmem, framed or uring, not {other}"
                    )),
                }
            }
            "--budget-mib" => args.budget_mib = number(value()).max(1),
            "--threads" => args.threads = number(value()).max(1),
            "-h" | "--help" => usage("a Redis-protocol server on ringmem"),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    args
}

fn main() -> io::Result<()> {
    let args = parse();
    tune_heap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> io::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", args.port)).await?;
    let addr = listener.local_addr()?;
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "listening on {addr}")?;
    stdout.flush()?;
    drop(stdout);
    if args.framed {
        let store = Arc::new(Store::new());
        sweep(store.clone());
        loop {
            let (conn, _) = accept(&listener).await;
            tokio::spawn(framed_mode::serve(conn, store.clone()));
        }
    } else {
        let budget = args.budget_mib << 20;
        let pool = ReadPool::try_new(budget)
            .unwrap_or_else(|e| usage(&format!("a read pool of {} MiB: {e}", args.budget_mib)));
        // The share of the pool values may take (percent; see the crate docs): half by
        // default, `RINGMEM_RESP_KEEP_PERCENT` to measure others.
        let percent = std::env::var("RINGMEM_RESP_KEEP_PERCENT")
            .ok()
            .and_then(|p| p.parse::<usize>().ok())
            .unwrap_or(50)
            .min(100);
        ringmem_mode::set_keep_limit(pool.budget() / 100 * percent);
        if let Some(min) = std::env::var("RINGMEM_RESP_KEEP_MIN")
            .ok()
            .and_then(|m| m.parse().ok())
        {
            ringmem_mode::set_keep_min(min);
        }
        let store = Arc::new(Store::new());
        sweep(store.clone());
        #[cfg(target_os = "linux")]
        if args.uring {
            let opts = ringmem::uring::UringOptions::new(budget).pool(pool.clone());
            let group = ringmem::uring::UringGroup::with_options(opts)
                .unwrap_or_else(|e| usage(&format!("--memory uring: {e}")));
            loop {
                let (conn, _) = accept(&listener).await;
                let serve =
                    ringmem_mode::serve_uring(conn, store.clone(), pool.clone(), group.clone());
                tokio::spawn(serve);
            }
        }
        if args.uring {
            usage("--memory uring: io_uring is Linux only");
        }
        loop {
            let (conn, _) = accept(&listener).await;
            tokio::spawn(ringmem_mode::serve(conn, store.clone(), pool.clone()));
        }
    }
}

/// The next connection; a failed accept (out of descriptors) is retried after a pause.
async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((conn, peer)) => {
                conn.set_nodelay(true).ok();
                return (conn, peer);
            }
            Err(e) => {
                eprintln!("ringmem-resp: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Removes expired keys once a second (reads remove them too, as they meet them),
/// and gives the heap's free pages back to the system after values were dropped:
/// once [`TRIM_AFTER`] bytes of them were, and once the drops stop.
fn sweep<V: AsRef<[u8]> + Send + Sync + 'static>(store: Arc<Store<V>>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let (mut trimmed_at, mut last) = (0, 0);
        loop {
            tick.tick().await;
            store.sweep();
            let dropped = store.dropped_bytes();
            let quiet = dropped == last && dropped != trimmed_at;
            if quiet || dropped.wrapping_sub(trimmed_at) >= TRIM_AFTER {
                trimmed_at = dropped;
                trim_heap();
            }
            last = dropped;
        }
    });
}

/// Bytes of values dropped after which the heap's free pages are given back; also the
/// size from which an allocation is a mapping of its own (see [`tune_heap`]).
const TRIM_AFTER: usize = 4 << 20;

/// The free bytes glibc keeps at the top of each of its heaps before it trims it by
/// itself (see [`tune_heap`]).
const TOP_KEPT: usize = 1 << 20;

/// Lets glibc keep up to [`TOP_KEPT`] bytes free at the top of each heap: by default
/// it gives the top back once 128 KiB are free there, so a list of 64 KiB values
/// popped newest first shrank the heap at every pop and the next value grew it again
/// (a system call and 16 page faults each: LPOP of 64 KiB at `-P 16` waited twice as
/// long as with this). Setting it turns off glibc's moving mmap threshold, so that is
/// set too: values under [`TRIM_AFTER`] come from the heap, larger ones are mappings of
/// their own, unmapped when dropped. The sweeper trims the rest ([`sweep`]), except
/// the top of a worker thread's arena, which `malloc_trim` does not give back: so
/// `TOP_KEPT` is no more than 1 MiB (at 4 MiB a burst of 256 MiB of 64 KiB values SET
/// and DELeted left 6.5-8.8 MiB resident against 3 MiB before it; 4.2-4.6 at 1 MiB,
/// with LPUSH and LPOP of 64 KiB values as fast as at 4 MiB; one arena for all
/// threads left 4.2-4.4 but cost LPUSH a fifth of its rate).
fn tune_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` takes no pointer; it runs before any other thread is started.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TOP_KEPT as libc::c_int);
        libc::mallopt(libc::M_MMAP_THRESHOLD, TRIM_AFTER as libc::c_int);
    }
}

/// Gives the free pages of the heap back to the system (glibc keeps the free chunks
/// of its arenas, resident, unless told).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and may be called from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
