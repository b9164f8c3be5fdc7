//! A small RESP2 client on blocking sockets, for what the server scenario asks of a
//! server that redis-benchmark cannot: a store of distinct keys (`key:%08d`; its `-r`
//! draws keys at random, so some repeat and the store holds fewer), a burst of large
//! values and their `DEL`, `INFO`, and the idle clients, which a child process of their
//! own holds open (`--idle-clients`, [`idle_child`]).

use std::io::{self, BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The hidden flag of the idle clients' child: `--idle-clients PORT COUNT`.
pub const IDLE_FLAG: &str = "--idle-clients";

/// How long a reply may take before the client gives up on the server.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of commands the pipelining writer gathers before each write.
const WRITE_CHUNK: usize = 64 << 10;

/// A reply, as far as these clients read them (no arrays: none of their commands
/// gets one).
#[derive(Debug, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`.
    Error(String),
    /// `:3`.
    Int(i64),
    /// `$5 hello`, `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
}

/// Appends the command `args` to `out` as a RESP array of bulk strings.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// The next reply on `r`.
pub fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = Vec::new();
    if r.read_until(b'\n', &mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("a reply line without its CRLF"));
    }
    let text = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    match line[0] {
        b'+' => Ok(Reply::Simple(text)),
        b'-' => Ok(Reply::Error(text)),
        b':' => text
            .parse()
            .map(Reply::Int)
            .map_err(|_| bad(format!("an integer reply that is none: {text}"))),
        b'$' => {
            let len: i64 = text
                .parse()
                .map_err(|_| bad(format!("a bulk length that is none: {text}")))?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Bulk(None));
            };
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body)?;
            if !body.ends_with(b"\r\n") {
                return Err(bad("a bulk reply without its CRLF"));
            }
            body.truncate(len);
            Ok(Reply::Bulk(Some(body)))
        }
        other => Err(bad(format!(
            "a reply of a kind this client does not read: {:?}",
            char::from(other)
        ))),
    }
}

/// A connection to the server at `port` on loopback.
fn connect(port: u16) -> io::Result<TcpStream> {
    let s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(REPLY_TIMEOUT))?;
    s.set_write_timeout(Some(REPLY_TIMEOUT))?;
    Ok(s)
}

/// Sends `count` commands on one connection, pipelined (a thread writes them, made by
/// `make(i, buf)`, while this one reads the replies), and checks reply `i` with
/// `check(i, reply)`. Returns the time from the first write to the last reply, or
/// what went wrong.
pub fn pipeline(
    port: u16,
    count: usize,
    make: impl Fn(usize, &mut Vec<u8>) + Send + 'static,
    mut check: impl FnMut(usize, Reply) -> Result<(), String>,
) -> Result<Duration, String> {
    let stream = connect(port).map_err(|e| format!("cannot connect to port {port}: {e}"))?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let writing = std::thread::spawn(move || -> io::Result<()> {
        let mut buf = Vec::with_capacity(2 * WRITE_CHUNK);
        for i in 0..count {
            make(i, &mut buf);
            if buf.len() >= WRITE_CHUNK {
                writer.write_all(&buf)?;
                buf.clear();
            }
        }
        writer.write_all(&buf)
    });
    let mut reader = BufReader::with_capacity(256 << 10, &stream);
    let read = (0..count).try_for_each(|i| {
        let reply = read_reply(&mut reader).map_err(|e| format!("reply {i}: {e}"))?;
        check(i, reply)
    });
    let took = started.elapsed();
    if read.is_err() {
        // A writer blocked on a server that stopped reading gets an error and ends.
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let written = writing
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the writer panicked")));
    read?;
    written.map_err(|e| format!("writing the commands: {e}"))?;
    Ok(took)
}

/// `check` for commands answered `+OK`.
pub fn expect_ok(i: usize, reply: Reply) -> Result<(), String> {
    match reply {
        Reply::Simple(s) if s == "OK" => Ok(()),
        other => Err(format!("reply {i}: {other:?} where +OK was due")),
    }
}

/// The server's `INFO` as `name:value` pairs (section headers and blank lines left out).
pub fn info(port: u16) -> Result<Vec<(String, String)>, String> {
    let mut s = connect(port).map_err(|e| format!("cannot connect to port {port}: {e}"))?;
    let mut cmd = Vec::new();
    command(&mut cmd, &[b"INFO"]);
    s.write_all(&cmd).map_err(|e| e.to_string())?;
    match read_reply(&mut BufReader::new(&s)).map_err(|e| format!("INFO: {e}"))? {
        Reply::Bulk(Some(body)) => Ok(parse_info(&String::from_utf8_lossy(&body))),
        other => Err(format!("INFO replied {other:?}")),
    }
}

fn parse_info(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Field `name` of an `INFO` reply, as a number.
pub fn info_field(info: &[(String, String)], name: &str) -> Option<f64> {
    info.iter().find(|f| f.0 == name)?.1.parse().ok()
}

/// The keys stored, from an `INFO` reply: `keys` (ringmem-resp) or `db0`'s `keys=`
/// (redis-server; no `db0` line when the store is empty).
pub fn info_keys(info: &[(String, String)]) -> Option<f64> {
    if let Some(k) = info_field(info, "keys") {
        return Some(k);
    }
    let Some(db0) = info.iter().find(|f| f.0 == "db0") else {
        return info.iter().any(|f| f.0 == "redis_version").then_some(0.0);
    };
    db0.1
        .split(',')
        .find_map(|kv| kv.strip_prefix("keys="))?
        .parse()
        .ok()
}

/// Whether the server at `port` answers `PING`.
pub fn ping(port: u16) -> bool {
    let Ok(mut s) = connect(port) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = [0; 7];
    s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && s.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// Connections opened and answered at a time by the idle clients: fewer than any
/// server's accept backlog, so no connection waits for a retransmitted SYN.
pub const IDLE_BATCH: usize = 100;

/// The idle clients' child (`--idle-clients PORT COUNT`): raises its descriptor limit,
/// opens `COUNT` connections to the server at `PORT`, each sending one `PING` and
/// reading its `PONG` (so the server has read from every one), prints `connected N
/// limit L` (and `error E` if it stopped short), and holds them open until its stdin
/// closes or it is killed.
pub fn idle_child(mut args: impl Iterator<Item = String>) -> ! {
    let mut num = || args.next().and_then(|a| a.parse::<usize>().ok());
    let (Some(port), Some(count)) = (num(), num()) else {
        eprintln!("usage: ringmem-bench {IDLE_FLAG} PORT COUNT");
        std::process::exit(2)
    };
    let limit = crate::nofile::raise_nofile();
    let port = u16::try_from(port).unwrap_or(0);
    let mut open: Vec<TcpStream> = Vec::with_capacity(count);
    let mut error = None;
    'batches: while open.len() < count {
        let first = open.len();
        for _ in first..count.min(first + IDLE_BATCH) {
            match connect(port).and_then(|mut s| s.write_all(b"PING\r\n").map(|()| s)) {
                Ok(s) => open.push(s),
                Err(e) => {
                    error = Some(format!("connection {}: {e}", open.len() + 1));
                    break;
                }
            }
        }
        for (k, s) in open[first..].iter_mut().enumerate() {
            let mut reply = [0; 7];
            if let Err(e) = s.read_exact(&mut reply) {
                error = Some(format!("connection {}: no PONG: {e}", first + k + 1));
                open.truncate(first + k);
                break 'batches;
            }
        }
        if error.is_some() {
            break;
        }
    }
    println!("connected {} limit {limit}", open.len());
    if let Some(e) = error {
        println!("error {e}");
    }
    let _ = io::stdout().flush();
    // Held until the parent closes stdin or kills this process.
    let _ = io::stdin().read(&mut [0; 1]);
    drop(open);
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        command(&mut out, &[b"SET", b"key:00000001", b"v\r\n"]);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$12\r\nkey:00000001\r\n$3\r\nv\r\n\r\n"
        );
    }

    #[test]
    fn replies_read_as_redis_writes_them() {
        let wire = b"+OK\r\n-ERR no\r\n:42\r\n$5\r\nhe\r\no\r\n$-1\r\n";
        let mut r = &wire[..];
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Simple("OK".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Int(42));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Bulk(Some(b"he\r\no".to_vec()))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        assert!(read_reply(&mut r).is_err());
        assert!(read_reply(&mut &b"*1\r\n"[..]).is_err());
    }

    #[test]
    fn info_gives_its_fields_and_either_servers_key_count() {
        let ours = parse_info("# Memory\r\nused_memory_rss:1024\r\nkeys:7\r\nreader_waits:0\r\n");
        assert_eq!(info_field(&ours, "used_memory_rss"), Some(1024.0));
        assert_eq!(info_field(&ours, "reader_waits"), Some(0.0));
        assert_eq!(info_keys(&ours), Some(7.0));
        let redis =
            parse_info("redis_version:7.0.15\r\n# Keyspace\r\ndb0:keys=1000000,expires=0\r\n");
        assert_eq!(info_keys(&redis), Some(1e6));
        assert_eq!(info_field(&redis, "reader_waits"), None);
        assert_eq!(
            info_keys(&parse_info("redis_version:7.0.15\r\n")),
            Some(0.0)
        );
    }
}
