//! The commands, on any [`Value`] type and any [`Replies`] sink: the one copy of the
//! server's logic that both memory modes run.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::ops::Range;
use std::time::Duration;

use crate::store::{Entry, Store, Value};

/// Where a command's replies go, in RESP2: each memory mode writes them its own way.
pub trait Replies<V: Value> {
    /// A reply whose bytes never change (`+OK\r\n`), written whole.
    fn raw(&mut self, bytes: &'static [u8]);
    /// `-<message>\r\n`: the message is made per error (rare), so it may allocate.
    fn error(&mut self, message: &str);
    /// `:<n>\r\n`.
    fn int(&mut self, n: i64);
    /// A stored value as a bulk string.
    fn bulk(&mut self, value: &V);
    /// A bulk string of the request's own bytes (`ECHO`).
    fn bulk_arg(&mut self, frame: &V::Frame, range: Range<usize>);
    /// A bulk string the server made (`INFO`).
    fn bulk_made(&mut self, bytes: &[u8]);
    /// `$-1\r\n`.
    fn nil(&mut self) {
        self.raw(b"$-1\r\n");
    }
    /// `*<n>\r\n`, the head of an array whose `n` elements follow.
    fn array(&mut self, n: usize);
}

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Then {
    /// Reads the next request.
    Go,
    /// Writes the replies and closes (`QUIT`).
    Close,
}

/// Facts INFO reports that the store does not know.
pub struct Info {
    /// `memory_mode:` ringmem or framed.
    pub mode: &'static str,
    /// Times a reader waited for pool room.
    pub reader_waits: u64,
    /// Bytes of the read pool in use.
    pub pool_bytes_in_use: usize,
    /// More `name:value` lines, each ending in `\r\n`.
    pub extra: String,
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";

/// Runs the request whose arguments are `args` (ranges of `frame`), replying to `out`.
pub fn execute<V: Value>(
    store: &Store<V>,
    frame: &V::Frame,
    args: &[Range<usize>],
    out: &mut impl Replies<V>,
    info: impl FnOnce() -> Info,
) -> Then {
    let bytes = frame.as_ref();
    let arg = |i: usize| &bytes[args[i].clone()];
    let Some(first) = args.first() else {
        // An empty request (`*0`, a blank line): Redis answers nothing.
        return Then::Go;
    };
    let name = &bytes[first.clone()];
    let n = args.len();
    let mut lower = [0u8; 16];
    let cmd: &[u8] = if name.len() <= lower.len() {
        let l = &mut lower[..name.len()];
        l.copy_from_slice(name);
        l.make_ascii_lowercase();
        l
    } else {
        name
    };
    // Redis's arity: exactly `a` arguments, or at least `-a`.
    let arity = |a: isize| -> bool {
        if a >= 0 {
            n == a as usize
        } else {
            n >= a.unsigned_abs()
        }
    };
    let table: Option<(&str, isize)> = match cmd {
        b"ping" => Some(("ping", -1)),
        b"echo" => Some(("echo", 2)),
        b"set" => Some(("set", -3)),
        b"get" => Some(("get", 2)),
        b"del" => Some(("del", -2)),
        b"exists" => Some(("exists", -2)),
        b"incr" => Some(("incr", 2)),
        b"mset" => Some(("mset", -3)),
        b"mget" => Some(("mget", -2)),
        b"lpush" => Some(("lpush", -3)),
        b"rpush" => Some(("rpush", -3)),
        b"lpop" => Some(("lpop", -2)),
        b"rpop" => Some(("rpop", -2)),
        b"lrange" => Some(("lrange", 4)),
        b"config" => Some(("config", -2)),
        b"command" => Some(("command", -1)),
        b"quit" => Some(("quit", -1)),
        b"info" => Some(("info", -1)),
        _ => None,
    };
    let Some((cname, a)) = table else {
        let mut msg = format!(
            "ERR unknown command '{}', with args beginning with: ",
            String::from_utf8_lossy(&name[..name.len().min(128)])
        );
        let mut shown = 0;
        for r in &args[1..] {
            if shown >= 128 {
                break;
            }
            let s = String::from_utf8_lossy(&bytes[r.clone()]);
            let _ = write!(msg, "'{s}' ");
            shown += s.len();
        }
        out.error(&msg);
        return Then::Go;
    };
    let too_many = match cname {
        "ping" => n > 2,
        "lpop" | "rpop" => n > 3,
        "mset" => n % 2 == 0,
        _ => false,
    };
    if !arity(a) || too_many {
        out.error(&format!(
            "ERR wrong number of arguments for '{cname}' command"
        ));
        return Then::Go;
    }
    match cname {
        "ping" if n == 2 => out.bulk_arg(frame, args[1].clone()),
        "ping" => out.raw(b"+PONG\r\n"),
        "echo" => out.bulk_arg(frame, args[1].clone()),
        "set" => {
            let mut ttl = None;
            let mut i = 3;
            while i < n {
                let unit = arg(i);
                let ms: i64 = if unit.eq_ignore_ascii_case(b"EX") {
                    1000
                } else if unit.eq_ignore_ascii_case(b"PX") {
                    1
                } else {
                    return syntax(out);
                };
                if ttl.is_some() || i + 1 >= n {
                    return syntax(out);
                }
                // As Redis: 0 or less, or a deadline in Unix milliseconds past i64, is
                // invalid.
                let after = |t: i64| t.checked_mul(ms).filter(|&m| m <= i64::MAX - unix_millis());
                match parse_i64(arg(i + 1)) {
                    Some(t) if t > 0 && after(t).is_some() => {
                        ttl = after(t).map(|m| Duration::from_millis(m as u64));
                    }
                    Some(_) => {
                        out.error("ERR invalid expire time in 'set' command");
                        return Then::Go;
                    }
                    None => {
                        out.error(NOT_INT);
                        return Then::Go;
                    }
                }
                i += 2;
            }
            let v = V::keep(frame, args[2].clone());
            // The value it replaces is dropped once the shard is unlocked.
            let old = store.with(arg(1), |s| s.set(arg(1), Entry::Str(v), ttl));
            drop(old);
            out.raw(b"+OK\r\n");
        }
        "get" => store.with(arg(1), |s| match s.get_mut(arg(1)).map(|s| &s.entry) {
            None => out.nil(),
            Some(Entry::Str(v)) => out.bulk(v),
            Some(Entry::List(_)) => out.error(WRONGTYPE),
        }),
        "del" | "exists" => {
            let del = cname == "del";
            let mut count = 0;
            for i in 1..n {
                let k = arg(i);
                let hit = store.with(k, |s| {
                    if del {
                        s.remove(k)
                    } else {
                        s.get_mut(k).is_some()
                    }
                });
                count += i64::from(hit);
            }
            out.int(count);
        }
        "incr" => {
            let k = arg(1);
            let r = store.with(k, |s| {
                let now = match s.get_mut(k).map(|s| &s.entry) {
                    None => 0,
                    Some(Entry::Str(v)) => parse_i64(v.as_ref()).ok_or(NOT_INT)?,
                    Some(Entry::List(_)) => return Err(WRONGTYPE),
                };
                let next = now
                    .checked_add(1)
                    .ok_or("ERR increment or decrement would overflow")?;
                let mut buf = itoa_buf();
                let text = fmt_i64(next, &mut buf);
                let deadline = s.get_mut(k).and_then(|s| s.deadline);
                let ttl = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
                Ok((next, s.set(k, Entry::Str(V::copy(text)), ttl)))
            });
            match r {
                Ok((v, old)) => {
                    drop(old);
                    out.int(v);
                }
                Err(e) => out.error(e),
            }
        }
        "mset" => {
            for i in (1..n).step_by(2) {
                let v = V::keep(frame, args[i + 1].clone());
                let old = store.with(arg(i), |s| s.set(arg(i), Entry::Str(v), None));
                drop(old);
            }
            out.raw(b"+OK\r\n");
        }
        "mget" => {
            out.array(n - 1);
            for i in 1..n {
                store.with(arg(i), |s| match s.get_mut(arg(i)).map(|s| &s.entry) {
                    Some(Entry::Str(v)) => out.bulk(v),
                    _ => out.nil(),
                });
            }
        }
        "lpush" | "rpush" => {
            let left = cname == "lpush";
            let k = arg(1);
            // The values are made before the shard is locked: a copy of a long value
            // (`RingValue` past its pool share) does not hold up the shard's other users.
            let first = V::keep(frame, args[2].clone());
            let rest: Vec<V> = args[3..]
                .iter()
                .map(|r| V::keep(frame, r.clone()))
                .collect();
            let r = store.with(k, |s| {
                let slot = s.entry_or(k, || Entry::List(VecDeque::new()));
                let Entry::List(list) = &mut slot.entry else {
                    return Err(WRONGTYPE);
                };
                for v in std::iter::once(first).chain(rest) {
                    if left {
                        list.push_front(v);
                    } else {
                        list.push_back(v);
                    }
                }
                Ok(list.len() as i64)
            });
            match r {
                Ok(len) => out.int(len),
                Err(e) => out.error(e),
            }
        }
        "lpop" | "rpop" => {
            let left = cname == "lpop";
            let count = match args.get(2) {
                None => None,
                Some(r) => match parse_i64(&bytes[r.clone()]) {
                    Some(c) if c >= 0 => Some(c as usize),
                    _ => {
                        out.error("ERR value is out of range, must be positive");
                        return Then::Go;
                    }
                },
            };
            let k = arg(1);
            store.with(k, |s| {
                let Some(slot) = s.get_mut(k) else {
                    match count {
                        None => out.nil(),
                        Some(_) => out.raw(b"*-1\r\n"),
                    }
                    return;
                };
                let Entry::List(list) = &mut slot.entry else {
                    out.error(WRONGTYPE);
                    return;
                };
                let mut dropped = 0;
                let mut pop = || {
                    if left {
                        list.pop_front()
                    } else {
                        list.pop_back()
                    }
                };
                match count {
                    None => match pop() {
                        Some(v) => {
                            out.bulk(&v);
                            dropped += v.as_ref().len();
                        }
                        None => out.nil(),
                    },
                    Some(c) => {
                        let c = c.min(list.len());
                        out.array(c);
                        for _ in 0..c {
                            let v = if left {
                                list.pop_front()
                            } else {
                                list.pop_back()
                            };
                            let v = v.expect("counted");
                            out.bulk(&v);
                            dropped += v.as_ref().len();
                        }
                    }
                }
                let empty = list.is_empty();
                s.note_dropped(dropped);
                if empty {
                    s.remove(k);
                }
            });
        }
        "lrange" => {
            let (Some(start), Some(stop)) = (parse_i64(arg(2)), parse_i64(arg(3))) else {
                out.error(NOT_INT);
                return Then::Go;
            };
            let k = arg(1);
            store.with(k, |s| match s.get_mut(k).map(|s| &s.entry) {
                None => out.array(0),
                Some(Entry::Str(_)) => out.error(WRONGTYPE),
                Some(Entry::List(list)) => {
                    let len = list.len() as i64;
                    let from = if start < 0 {
                        (len + start).max(0)
                    } else {
                        start
                    };
                    let to = if stop < 0 {
                        len + stop
                    } else {
                        stop.min(len - 1)
                    };
                    if from > to || from >= len {
                        out.array(0);
                        return;
                    }
                    out.array((to - from + 1) as usize);
                    for v in list.range(from as usize..=to as usize) {
                        out.bulk(v);
                    }
                }
            });
        }
        "config" => {
            if !arg(1).eq_ignore_ascii_case(b"get") || n != 3 {
                if arg(1).eq_ignore_ascii_case(b"get") {
                    out.error("ERR wrong number of arguments for 'config|get' command");
                } else {
                    out.error(
                        "ERR unknown subcommand or wrong number of arguments for 'config' command",
                    );
                }
                return Then::Go;
            }
            let pat = arg(2).to_ascii_lowercase();
            let all = pat == b"*";
            let save = all || pat == b"save";
            let aof = all || pat == b"appendonly";
            out.array(2 * (usize::from(save) + usize::from(aof)));
            if save {
                out.raw(b"$4\r\nsave\r\n$0\r\n\r\n");
            }
            if aof {
                out.raw(b"$10\r\nappendonly\r\n$2\r\nno\r\n");
            }
        }
        "command" => out.raw(b"*0\r\n"),
        "quit" => {
            out.raw(b"+OK\r\n");
            return Then::Close;
        }
        "info" => {
            let i = info();
            let text = format!(
                "# Server\r\nredis_version:7.0.0\r\nserver_name:ringmem-resp\r\n\
                 memory_mode:{}\r\n# Memory\r\nused_memory_rss:{}\r\n\
                 pool_bytes_in_use:{}\r\nreader_waits:{}\r\n{}# Keyspace\r\nkeys:{}\r\n",
                i.mode,
                rss_bytes(),
                i.pool_bytes_in_use,
                i.reader_waits,
                i.extra,
                store.keys(),
            );
            out.bulk_made(text.as_bytes());
        }
        _ => unreachable!("every command of the table is matched"),
    }
    Then::Go
}

fn syntax<V: Value>(out: &mut impl Replies<V>) -> Then {
    out.error("ERR syntax error");
    Then::Go
}

/// An integer as Redis reads one (`string2ll`: no `+`, no leading zeros).
/// Milliseconds since the Unix epoch, as Redis's expiry deadlines count them.
fn unix_millis() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}

fn parse_i64(s: &[u8]) -> Option<i64> {
    let t = std::str::from_utf8(s).ok()?;
    let v: i64 = t.parse().ok()?;
    // Canonical form only: "01", "+1", "-0" are not integers to Redis.
    let mut buf = itoa_buf();
    (fmt_i64(v, &mut buf) == s).then_some(v)
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `v` in decimal, in `buf`.
pub(crate) fn fmt_i64(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// The process's resident memory (Linux's `VmRSS`), in bytes; 0 where unknown.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use ringmem::io::Resp;

    /// Replies as RESP bytes, as a client reads them.
    struct Wire(Vec<u8>);

    impl Replies<Bytes> for Wire {
        fn raw(&mut self, bytes: &'static [u8]) {
            self.0.extend(bytes);
        }
        fn error(&mut self, message: &str) {
            self.0.extend(format!("-{message}\r\n").bytes());
        }
        fn int(&mut self, n: i64) {
            self.0.extend(format!(":{n}\r\n").bytes());
        }
        fn bulk(&mut self, value: &Bytes) {
            self.bulk_made(value);
        }
        fn bulk_arg(&mut self, frame: &Bytes, range: Range<usize>) {
            self.bulk_made(&frame[range]);
        }
        fn bulk_made(&mut self, bytes: &[u8]) {
            self.0.extend(format!("${}\r\n", bytes.len()).bytes());
            self.0.extend(bytes);
            self.0.extend(b"\r\n");
        }
        fn array(&mut self, n: usize) {
            self.0.extend(format!("*{n}\r\n").bytes());
        }
    }

    /// Runs `line` (an inline command) on `store`: the reply's bytes.
    fn run(store: &Store<Bytes>, line: &str) -> String {
        let frame = Bytes::copy_from_slice(line.as_bytes());
        let args: Vec<_> = Resp::args(&frame).collect();
        let mut out = Wire(Vec::new());
        execute(store, &frame, &args, &mut out, || Info {
            mode: "test",
            reader_waits: 0,
            pool_bytes_in_use: 0,
            extra: String::new(),
        });
        String::from_utf8(out.0).unwrap()
    }

    #[test]
    fn commands_answer_as_redis_does() {
        let s = Store::new();
        let cases = [
            ("PING", "+PONG\r\n"),
            ("ping hi", "$2\r\nhi\r\n"),
            (
                "ping a b",
                "-ERR wrong number of arguments for 'ping' command\r\n",
            ),
            ("ECHO x", "$1\r\nx\r\n"),
            ("SET k v", "+OK\r\n"),
            ("GET k", "$1\r\nv\r\n"),
            ("GET nope", "$-1\r\n"),
            (
                "get",
                "-ERR wrong number of arguments for 'get' command\r\n",
            ),
            ("SET k v EX", "-ERR syntax error\r\n"),
            (
                "SET k v EX x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                "SET k v EX 0",
                "-ERR invalid expire time in 'set' command\r\n",
            ),
            ("SET k v NX", "-ERR syntax error\r\n"),
            ("INCR k", "-ERR value is not an integer or out of range\r\n"),
            ("INCR n", ":1\r\n"),
            ("INCR n", ":2\r\n"),
            ("SET big 9223372036854775807", "+OK\r\n"),
            ("INCR big", "-ERR increment or decrement would overflow\r\n"),
            ("EXISTS k n nope k", ":3\r\n"),
            ("DEL k nope", ":1\r\n"),
            ("MSET a 1 b 2", "+OK\r\n"),
            (
                "MSET a 1 b",
                "-ERR wrong number of arguments for 'mset' command\r\n",
            ),
            ("MGET a b c", "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n"),
            ("RPUSH l a b c", ":3\r\n"),
            ("LPUSH l z", ":4\r\n"),
            (
                "LRANGE l 0 -1",
                "*4\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
            ),
            ("LRANGE l -2 100", "*2\r\n$1\r\nb\r\n$1\r\nc\r\n"),
            ("LRANGE l 5 9", "*0\r\n"),
            ("LRANGE nope 0 -1", "*0\r\n"),
            (
                "GET l",
                "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            ),
            (
                "LPUSH a x",
                "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            ),
            ("LPOP l", "$1\r\nz\r\n"),
            ("RPOP l 2", "*2\r\n$1\r\nc\r\n$1\r\nb\r\n"),
            (
                "LPOP l -1",
                "-ERR value is out of range, must be positive\r\n",
            ),
            ("LPOP l 5", "*1\r\n$1\r\na\r\n"),
            ("LPOP l", "$-1\r\n"),
            ("LPOP l 1", "*-1\r\n"),
            ("CONFIG GET save", "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"),
            (
                "CONFIG GET appendonly",
                "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n",
            ),
            ("CONFIG GET maxmemory", "*0\r\n"),
            ("COMMAND DOCS", "*0\r\n"),
            (
                "FOO a b",
                "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n",
            ),
            ("QUIT", "+OK\r\n"),
        ];
        for (line, want) in cases {
            assert_eq!(run(&s, line), want, "{line}");
        }
        assert!(run(&s, "INFO").contains("keys:4\r\n"));
        assert_eq!(s.keys(), 4);
    }

    #[test]
    fn ints_print_as_redis_reads_them() {
        let mut buf = [0; 20];
        for v in [0, 1, -1, 10, i64::MAX, i64::MIN] {
            assert_eq!(fmt_i64(v, &mut buf), v.to_string().as_bytes());
            assert_eq!(parse_i64(v.to_string().as_bytes()), Some(v));
        }
        for bad in ["", "01", "+1", "-0", " 1", "1a", "99999999999999999999"] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad}");
        }
    }
}
