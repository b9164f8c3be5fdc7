//! The server driven by a client nobody here wrote: the `redis` crate.
//!
//! Every command of the contract, with the replies Redis 7 gives (`RESP_TEST_SERVER=redis`
//! runs these tests against `redis-server` to show that they do), pipelines of 1,000
//! commands, binary-safe values, values of 0 B to 512 KiB and 200 concurrent clients.
//! Each test runs against both memory modes.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{error_text, expect_reply, read_until_closed, servers, Kind, Server, PATIENCE};
use redis::{Connection, RedisResult, Value};

/// Sends one command made of `args` and returns the reply; server errors are `Err`.
fn call<A: AsRef<[u8]>>(con: &mut Connection, args: &[A]) -> RedisResult<Value> {
    let mut cmd = redis::Cmd::new();
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd.query(con)
}

/// The reply to a command that must succeed.
fn ok<A: AsRef<[u8]>>(server: &Server, con: &mut Connection, args: &[A]) -> Value {
    call(con, args).unwrap_or_else(|e| panic!("{}: {}: {e}", server.name(), show(args)))
}

/// The error text of a command that must fail: `ERR syntax error`.
fn err<A: AsRef<[u8]>>(server: &Server, con: &mut Connection, args: &[A]) -> String {
    match call(con, args) {
        Ok(v) => panic!(
            "{}: {}: expected an error, got {v:?}",
            server.name(),
            show(args)
        ),
        Err(e) => error_text(&e),
    }
}

fn show<A: AsRef<[u8]>>(args: &[A]) -> String {
    let words: Vec<_> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a.as_ref()).into_owned())
        .collect();
    words.join(" ")
}

fn bulk(bytes: impl AsRef<[u8]>) -> Value {
    Value::BulkString(bytes.as_ref().to_vec())
}

fn bulks<B: AsRef<[u8]>>(items: &[B]) -> Value {
    Value::Array(items.iter().map(bulk).collect())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

#[test]
fn ping_answers_pong_or_its_message() {
    for server in servers() {
        let mut con = server.client();
        let pong = ok(&server, &mut con, &["PING"]);
        assert_eq!(
            pong,
            Value::SimpleString("PONG".into()),
            "{}",
            server.name()
        );
        let echoed = ok(&server, &mut con, &["PING", "hello there"]);
        assert_eq!(echoed, bulk("hello there"), "{}", server.name());
    }
}

#[test]
fn inline_ping_answers_pong_on_a_raw_connection() {
    for server in servers() {
        let mut stream = server.raw();
        stream.write_all(b"PING\r\n").unwrap();
        expect_reply(&mut stream, b"+PONG\r\n", server.name());
        // Two inline commands in one write, then a RESP one: each answered in order.
        stream
            .write_all(b"PING\r\nPING\r\n*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n")
            .unwrap();
        expect_reply(
            &mut stream,
            b"+PONG\r\n+PONG\r\n$2\r\nhi\r\n",
            server.name(),
        );
    }
}

#[test]
fn echo_returns_its_argument_as_a_bulk_string() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(ok(&server, &mut con, &["ECHO", "x y z"]), bulk("x y z"));
        assert_eq!(ok(&server, &mut con, &["ECHO", ""]), bulk(""));
    }
}

#[test]
fn get_returns_what_set_stored_and_nil_for_a_missing_key() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(ok(&server, &mut con, &["GET", "s:k"]), Value::Nil);
        assert_eq!(ok(&server, &mut con, &["SET", "s:k", "v1"]), Value::Okay);
        assert_eq!(ok(&server, &mut con, &["GET", "s:k"]), bulk("v1"));
        assert_eq!(ok(&server, &mut con, &["SET", "s:k", "v2"]), Value::Okay);
        assert_eq!(
            ok(&server, &mut con, &["GET", "s:k"]),
            bulk("v2"),
            "{}",
            server.name()
        );
        // SET replaces a list as well: it never answers WRONGTYPE.
        ok(&server, &mut con, &["RPUSH", "s:l", "a"]);
        assert_eq!(
            ok(&server, &mut con, &["SET", "s:l", "now a string"]),
            Value::Okay
        );
        assert_eq!(ok(&server, &mut con, &["GET", "s:l"]), bulk("now a string"));
    }
}

/// Polls `GET key` until it is nil; fails after `PATIENCE`.
fn wait_until_expired(server: &Server, con: &mut Connection, key: &str) {
    let deadline = Instant::now() + PATIENCE;
    while ok(server, con, &["GET", key]) != Value::Nil {
        assert!(
            Instant::now() < deadline,
            "{}: {key} never expired",
            server.name()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ok(server, con, &["EXISTS", key]),
        Value::Int(0),
        "{}",
        server.name()
    );
}

#[test]
fn set_with_px_stores_the_value_until_its_milliseconds_pass() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(
            ok(&server, &mut con, &["SET", "px:short", "v", "PX", "50"]),
            Value::Okay
        );
        assert_eq!(
            ok(&server, &mut con, &["SET", "px:long", "v", "PX", "3600000"]),
            Value::Okay
        );
        wait_until_expired(&server, &mut con, "px:short");
        assert_eq!(
            ok(&server, &mut con, &["GET", "px:long"]),
            bulk("v"),
            "{}",
            server.name()
        );
        // A SET without an expiry makes an expiring key permanent again.
        ok(&server, &mut con, &["SET", "px:again", "v", "PX", "50"]);
        ok(&server, &mut con, &["SET", "px:again", "kept"]);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(ok(&server, &mut con, &["GET", "px:again"]), bulk("kept"));
    }
}

#[test]
fn set_with_ex_stores_the_value_until_its_seconds_pass() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(
            ok(&server, &mut con, &["SET", "ex:short", "v", "ex", "1"]),
            Value::Okay
        );
        assert_eq!(
            ok(&server, &mut con, &["SET", "ex:long", "v", "EX", "3600"]),
            Value::Okay
        );
        assert_eq!(ok(&server, &mut con, &["GET", "ex:long"]), bulk("v"));
        wait_until_expired(&server, &mut con, "ex:short");
        assert_eq!(
            ok(&server, &mut con, &["GET", "ex:long"]),
            bulk("v"),
            "{}",
            server.name()
        );
    }
}

#[test]
fn set_with_an_unknown_or_incomplete_option_is_a_syntax_error() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(
            err(&server, &mut con, &["SET", "o:k", "v", "BOGUS"]),
            SYNTAX
        );
        assert_eq!(err(&server, &mut con, &["SET", "o:k", "v", "EX"]), SYNTAX);
        assert_eq!(err(&server, &mut con, &["SET", "o:k", "v", "PX"]), SYNTAX);
        assert_eq!(
            err(&server, &mut con, &["SET", "o:k", "v", "EX", "ten"]),
            NOT_AN_INTEGER
        );
        // None of them stored anything.
        assert_eq!(
            ok(&server, &mut con, &["GET", "o:k"]),
            Value::Nil,
            "{}",
            server.name()
        );
    }
}

#[test]
fn set_with_a_zero_negative_or_overflowing_expiry_is_an_invalid_expire_time() {
    // Redis 7 refuses a time of 0 or less, and one whose deadline in milliseconds
    // since the epoch would pass i64::MAX, rather than store a key that never expires.
    let cases: [[&str; 2]; 7] = [
        ["EX", "0"],
        ["EX", "-1"],
        ["PX", "0"],
        ["PX", "-5"],
        ["EX", "9223372036854775"],
        ["EX", "9223372036854775807"],
        ["PX", "9223372036854775807"],
    ];
    for server in servers() {
        let mut con = server.client();
        for [unit, time] in cases {
            let e = err(&server, &mut con, &["SET", "x:k", "v", unit, time]);
            let expected = "ERR invalid expire time in 'set' command";
            assert_eq!(e, expected, "{}: SET x:k v {unit} {time}", server.name());
        }
        assert_eq!(
            ok(&server, &mut con, &["GET", "x:k"]),
            Value::Nil,
            "{}",
            server.name()
        );
    }
}

#[test]
fn del_removes_strings_and_lists_and_counts_what_it_removed() {
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["SET", "d:a", "1"]);
        ok(&server, &mut con, &["SET", "d:b", "2"]);
        ok(&server, &mut con, &["RPUSH", "d:l", "x", "y"]);
        let removed = ok(
            &server,
            &mut con,
            &["DEL", "d:a", "d:l", "d:missing", "d:a"],
        );
        assert_eq!(removed, Value::Int(2), "{}", server.name());
        assert_eq!(ok(&server, &mut con, &["GET", "d:a"]), Value::Nil);
        assert_eq!(
            ok(&server, &mut con, &["LRANGE", "d:l", "0", "-1"]),
            Value::Array(vec![])
        );
        assert_eq!(ok(&server, &mut con, &["GET", "d:b"]), bulk("2"));
        assert_eq!(ok(&server, &mut con, &["DEL", "d:a"]), Value::Int(0));
    }
}

#[test]
fn exists_counts_every_named_key_that_exists_repeats_included() {
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["SET", "e:s", "v"]);
        ok(&server, &mut con, &["LPUSH", "e:l", "v"]);
        assert_eq!(ok(&server, &mut con, &["EXISTS", "e:none"]), Value::Int(0));
        assert_eq!(ok(&server, &mut con, &["EXISTS", "e:s"]), Value::Int(1));
        let count = ok(
            &server,
            &mut con,
            &["EXISTS", "e:s", "e:l", "e:none", "e:s"],
        );
        assert_eq!(count, Value::Int(3), "{}", server.name());
    }
}

#[test]
fn incr_counts_from_zero_and_leaves_a_string_get_can_read() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(ok(&server, &mut con, &["INCR", "i:n"]), Value::Int(1));
        assert_eq!(ok(&server, &mut con, &["INCR", "i:n"]), Value::Int(2));
        assert_eq!(ok(&server, &mut con, &["GET", "i:n"]), bulk("2"));
        ok(&server, &mut con, &["SET", "i:m", "-10"]);
        assert_eq!(ok(&server, &mut con, &["INCR", "i:m"]), Value::Int(-9));
        ok(&server, &mut con, &["SET", "i:max", "9223372036854775806"]);
        let max = ok(&server, &mut con, &["INCR", "i:max"]);
        assert_eq!(max, Value::Int(i64::MAX), "{}", server.name());
    }
}

#[test]
fn incr_on_a_value_that_is_not_an_integer_fails_and_keeps_the_value() {
    for server in servers() {
        let mut con = server.client();
        for text in ["abc", "", "1.5", " 1", "1 ", "99999999999999999999", "+1"] {
            ok(&server, &mut con, &["SET", "i:text", text]);
            let e = err(&server, &mut con, &["INCR", "i:text"]);
            assert_eq!(e, NOT_AN_INTEGER, "{}: INCR of {text:?}", server.name());
            assert_eq!(ok(&server, &mut con, &["GET", "i:text"]), bulk(text));
        }
    }
}

#[test]
fn incr_past_i64_max_is_an_overflow_error_as_redis_words_it() {
    // The contract's list of error texts leaves this one out, but it says "replies as
    // Redis 7 gives them", and Redis 7 answers an overflow with its own words.
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["SET", "i:top", &i64::MAX.to_string()]);
        let e = err(&server, &mut con, &["INCR", "i:top"]);
        assert_eq!(
            e,
            "ERR increment or decrement would overflow",
            "{}",
            server.name()
        );
        assert_eq!(
            ok(&server, &mut con, &["GET", "i:top"]),
            bulk(i64::MAX.to_string())
        );
    }
}

#[test]
fn mget_reads_what_mset_stored_with_nil_for_missing_keys_and_lists() {
    for server in servers() {
        let mut con = server.client();
        let set = ok(
            &server,
            &mut con,
            &["MSET", "m:a", "1", "m:b", "2", "m:c", "3", "m:a", "4"],
        );
        assert_eq!(set, Value::Okay);
        ok(&server, &mut con, &["RPUSH", "m:list", "x"]);
        let got = ok(
            &server,
            &mut con,
            &["MGET", "m:a", "m:missing", "m:c", "m:list", "m:b"],
        );
        let expected = Value::Array(vec![
            bulk("4"),
            Value::Nil,
            bulk("3"),
            Value::Nil,
            bulk("2"),
        ]);
        assert_eq!(got, expected, "{}", server.name());
    }
}

#[test]
fn lpush_and_rpush_return_the_length_and_build_the_list_in_order() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(
            ok(&server, &mut con, &["RPUSH", "l:k", "c", "d"]),
            Value::Int(2)
        );
        // LPUSH puts its arguments at the head one after the other: b, then a before it.
        assert_eq!(
            ok(&server, &mut con, &["LPUSH", "l:k", "b", "a"]),
            Value::Int(4)
        );
        assert_eq!(ok(&server, &mut con, &["RPUSH", "l:k", "e"]), Value::Int(5));
        let all = ok(&server, &mut con, &["LRANGE", "l:k", "0", "-1"]);
        assert_eq!(all, bulks(&["a", "b", "c", "d", "e"]), "{}", server.name());
    }
}

#[test]
fn lpop_and_rpop_without_a_count_return_one_element_or_nil() {
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["RPUSH", "p:k", "a", "b", "c"]);
        assert_eq!(ok(&server, &mut con, &["LPOP", "p:k"]), bulk("a"));
        assert_eq!(ok(&server, &mut con, &["RPOP", "p:k"]), bulk("c"));
        assert_eq!(ok(&server, &mut con, &["LPOP", "p:k"]), bulk("b"));
        // The last pop removed the key.
        assert_eq!(
            ok(&server, &mut con, &["EXISTS", "p:k"]),
            Value::Int(0),
            "{}",
            server.name()
        );
        assert_eq!(ok(&server, &mut con, &["LPOP", "p:k"]), Value::Nil);
        assert_eq!(ok(&server, &mut con, &["RPOP", "p:k"]), Value::Nil);
    }
}

#[test]
fn lpop_and_rpop_with_a_count_return_an_array_or_a_null_array() {
    for server in servers() {
        let mut con = server.client();
        ok(
            &server,
            &mut con,
            &["RPUSH", "c:k", "1", "2", "3", "4", "5", "6"],
        );
        assert_eq!(
            ok(&server, &mut con, &["LPOP", "c:k", "2"]),
            bulks(&["1", "2"])
        );
        assert_eq!(
            ok(&server, &mut con, &["RPOP", "c:k", "2"]),
            bulks(&["6", "5"])
        );
        assert_eq!(
            ok(&server, &mut con, &["LPOP", "c:k", "0"]),
            Value::Array(vec![])
        );
        // A count past the length returns what there is and removes the key.
        assert_eq!(
            ok(&server, &mut con, &["RPOP", "c:k", "10"]),
            bulks(&["4", "3"])
        );
        assert_eq!(ok(&server, &mut con, &["EXISTS", "c:k"]), Value::Int(0));
        // On a missing key, RESP2's null array (`*-1`), which the client reads as nil.
        assert_eq!(
            ok(&server, &mut con, &["LPOP", "c:k", "2"]),
            Value::Nil,
            "{}",
            server.name()
        );
        assert_eq!(ok(&server, &mut con, &["RPOP", "c:k", "2"]), Value::Nil);
    }
}

#[test]
fn lrange_counts_negative_indices_from_the_end_and_clamps_the_range() {
    for server in servers() {
        let mut con = server.client();
        ok(
            &server,
            &mut con,
            &["RPUSH", "r:k", "a", "b", "c", "d", "e"],
        );
        let range = |con: &mut Connection, start: &str, stop: &str| {
            ok(&server, con, &["LRANGE", "r:k", start, stop])
        };
        assert_eq!(
            range(&mut con, "0", "-1"),
            bulks(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(range(&mut con, "-2", "-1"), bulks(&["d", "e"]));
        assert_eq!(range(&mut con, "1", "-2"), bulks(&["b", "c", "d"]));
        assert_eq!(range(&mut con, "-100", "1"), bulks(&["a", "b"]));
        assert_eq!(range(&mut con, "3", "100"), bulks(&["d", "e"]));
        assert_eq!(range(&mut con, "0", "0"), bulks(&["a"]));
        assert_eq!(range(&mut con, "3", "1"), Value::Array(vec![]));
        assert_eq!(range(&mut con, "5", "10"), Value::Array(vec![]));
        assert_eq!(
            range(&mut con, "-1", "-2"),
            Value::Array(vec![]),
            "{}",
            server.name()
        );
        assert_eq!(
            ok(&server, &mut con, &["LRANGE", "r:missing", "0", "-1"]),
            Value::Array(vec![])
        );
        assert_eq!(
            err(&server, &mut con, &["LRANGE", "r:k", "a", "1"]),
            NOT_AN_INTEGER
        );
    }
}

#[test]
fn a_command_on_a_key_of_the_other_type_is_wrongtype() {
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["SET", "w:s", "v"]);
        ok(&server, &mut con, &["RPUSH", "w:l", "v"]);
        let string_on_list: [&[&str]; 2] = [&["GET", "w:l"], &["INCR", "w:l"]];
        let list_on_string: [&[&str]; 5] = [
            &["LPUSH", "w:s", "x"],
            &["RPUSH", "w:s", "x"],
            &["LPOP", "w:s"],
            &["RPOP", "w:s", "2"],
            &["LRANGE", "w:s", "0", "-1"],
        ];
        for args in string_on_list.iter().chain(&list_on_string) {
            let e = err(&server, &mut con, args);
            assert_eq!(e, WRONGTYPE, "{}: {}", server.name(), show(args));
        }
        // Nothing changed.
        assert_eq!(ok(&server, &mut con, &["GET", "w:s"]), bulk("v"));
        assert_eq!(
            ok(&server, &mut con, &["LRANGE", "w:l", "0", "-1"]),
            bulks(&["v"])
        );
    }
}

#[test]
fn config_get_answers_save_and_appendonly_as_pairs_and_other_names_with_nothing() {
    for server in servers() {
        let mut con = server.client();
        for name in ["save", "appendonly"] {
            let Value::Array(pair) = ok(&server, &mut con, &["CONFIG", "GET", name]) else {
                panic!("{}: CONFIG GET {name}: not an array", server.name());
            };
            assert_eq!(
                pair.len(),
                2,
                "{}: CONFIG GET {name}: {pair:?}",
                server.name()
            );
            assert_eq!(pair[0], bulk(name), "{}", server.name());
            assert!(
                matches!(pair[1], Value::BulkString(_)),
                "{}: {pair:?}",
                server.name()
            );
        }
        let none = ok(&server, &mut con, &["CONFIG", "GET", "no-such-parameter"]);
        assert_eq!(none, Value::Array(vec![]), "{}", server.name());
    }
}

#[test]
fn command_answers_an_array() {
    // Redis lists its whole command table; the contract asks only for an (empty)
    // array, which is what clients such as redis-cli need at start-up.
    for server in servers() {
        let mut con = server.client();
        let reply = ok(&server, &mut con, &["COMMAND"]);
        assert!(
            matches!(reply, Value::Array(_)),
            "{}: {reply:?}",
            server.name()
        );
        if server.kind() != Kind::Redis {
            assert_eq!(reply, Value::Array(vec![]), "{}", server.name());
        }
    }
}

#[test]
fn quit_answers_ok_and_closes_the_connection() {
    for server in servers() {
        let mut stream = server.raw();
        // The PING after QUIT in the same write must not be answered.
        stream
            .write_all(b"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n")
            .unwrap();
        let (got, closed) = read_until_closed(&mut stream);
        assert_eq!(
            String::from_utf8_lossy(&got),
            "+OK\r\n",
            "{}",
            server.name()
        );
        assert!(
            closed,
            "{}: the connection is still open after QUIT",
            server.name()
        );
        server.assert_serves("after a QUIT");
    }
}

#[test]
fn info_reports_rss_keys_reader_waits_and_pool_bytes() {
    for server in servers() {
        let mut con = server.client();
        ok(
            &server,
            &mut con,
            &["MSET", "n:a", "1", "n:b", "2", "n:c", "3"],
        );
        ok(&server, &mut con, &["RPUSH", "n:l", "x"]);
        ok(&server, &mut con, &["DEL", "n:b"]);
        let Value::BulkString(text) = ok(&server, &mut con, &["INFO"]) else {
            panic!("{}: INFO is not a bulk string", server.name());
        };
        let text = String::from_utf8(text).expect("INFO is text");
        assert!(
            text.contains("\r\n"),
            "{}: INFO lines end in CRLF",
            server.name()
        );
        let info = common::parse_info(&text);
        let field = |name: &str| -> u64 {
            let (_, v) = info
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{}: INFO has no {name}: {text}", server.name()));
            v.parse()
                .unwrap_or_else(|e| panic!("{}: INFO {name}:{v}: {e}", server.name()))
        };
        // VmRSS in bytes: any process holds more than 1 MiB, and a figure in KiB
        // would be under it.
        let rss = field("used_memory_rss");
        assert!(rss >= 1 << 20, "{}: used_memory_rss:{rss}", server.name());
        assert!(rss < 1 << 40, "{}: used_memory_rss:{rss}", server.name());
        match server.kind() {
            // Redis counts keys in its keyspace section (`db0:keys=3,...`) and has no
            // read pool: only the RSS line is common to both servers.
            Kind::Redis => {
                let (_, db0) = info.iter().find(|(n, _)| n == "db0").expect("db0");
                assert!(db0.starts_with("keys=3,"), "redis-server: db0:{db0}");
            }
            Kind::Ringmem => {
                assert_eq!(field("keys"), 3, "ringmem");
                field("reader_waits");
                field("pool_bytes_in_use");
            }
            Kind::Framed => {
                assert_eq!(field("keys"), 3, "framed");
                assert_eq!(field("reader_waits"), 0, "framed has no pool to wait for");
                assert_eq!(field("pool_bytes_in_use"), 0, "framed has no pool");
            }
        }
    }
}

#[test]
fn a_wrong_number_of_arguments_is_an_error_naming_the_command_in_lower_case() {
    for server in servers() {
        let mut con = server.client();
        let cases: [&[&str]; 14] = [
            &["GET"],
            &["get", "a", "b"],
            &["SET", "k"],
            &["ECHO"],
            &["DEL"],
            &["EXISTS"],
            &["INCR"],
            &["MSET", "k"],
            &["MSET", "a", "1", "b"],
            &["MGET"],
            &["LPUSH", "k"],
            &["RPUSH", "k"],
            &["LRANGE", "k", "0"],
            &["LPOP"],
        ];
        for args in cases {
            let name = args[0].to_lowercase();
            let e = err(&server, &mut con, args);
            let expected = format!("ERR wrong number of arguments for '{name}' command");
            assert_eq!(e, expected, "{}: {}", server.name(), show(args));
        }
        // The connection is still usable.
        assert_eq!(
            ok(&server, &mut con, &["ECHO", "still here"]),
            bulk("still here")
        );
    }
}

#[test]
fn an_unknown_command_is_an_error_quoting_it_and_its_first_arguments() {
    for server in servers() {
        let mut con = server.client();
        let e = err(&server, &mut con, &["FLY", "to", "the moon"]);
        let expected = "ERR unknown command 'FLY', with args beginning with: 'to' 'the moon' ";
        assert_eq!(e, expected, "{}", server.name());
        let e = err(&server, &mut con, &["nosuch"]);
        assert_eq!(
            e,
            "ERR unknown command 'nosuch', with args beginning with: "
        );
        assert_eq!(
            ok(&server, &mut con, &["PING"]),
            Value::SimpleString("PONG".into())
        );
    }
}

#[test]
fn command_names_are_case_insensitive() {
    for server in servers() {
        let mut con = server.client();
        assert_eq!(ok(&server, &mut con, &["set", "ci:k", "v"]), Value::Okay);
        assert_eq!(ok(&server, &mut con, &["gEt", "ci:k"]), bulk("v"));
        assert_eq!(
            ok(&server, &mut con, &["rpush", "ci:l", "a"]),
            Value::Int(1)
        );
        assert_eq!(
            ok(&server, &mut con, &["Lrange", "ci:l", "0", "-1"]),
            bulks(&["a"])
        );
        let with_px = ok(&server, &mut con, &["set", "ci:e", "v", "px", "3600000"]);
        assert_eq!(with_px, Value::Okay, "{}", server.name());
    }
}

#[test]
fn a_pipeline_of_1000_commands_is_answered_in_order() {
    for server in servers() {
        let mut con = server.client();
        let mut sets = redis::pipe();
        for i in 0..1000 {
            sets.cmd("SET")
                .arg(format!("pl:{i}"))
                .arg(format!("value {i}"));
        }
        let replies: Vec<Value> = sets.query(&mut con).unwrap();
        assert_eq!(replies, vec![Value::Okay; 1000], "{}", server.name());

        let mut gets = redis::pipe();
        for i in 0..1000 {
            gets.cmd("GET").arg(format!("pl:{i}"));
        }
        let values: Vec<String> = gets.query(&mut con).unwrap();
        let expected: Vec<String> = (0..1000).map(|i| format!("value {i}")).collect();
        assert_eq!(values, expected, "{}", server.name());

        // A mixed pipeline: each INCR sees the one before it, each RPUSH the length.
        let mut mixed = redis::pipe();
        for _ in 0..250 {
            mixed.cmd("INCR").arg("pl:counter");
            mixed.cmd("RPUSH").arg("pl:list").arg("x");
            mixed.cmd("PING");
            mixed.cmd("EXISTS").arg("pl:7").arg("pl:none");
        }
        let replies: Vec<Value> = mixed.query(&mut con).unwrap();
        for (i, chunk) in replies.chunks(4).enumerate() {
            let n = i as i64 + 1;
            let expected = [
                Value::Int(n),
                Value::Int(n),
                Value::SimpleString("PONG".into()),
                Value::Int(1),
            ];
            assert_eq!(chunk, expected, "{}: round {i}", server.name());
        }
    }
}

/// Every byte value, and the RESP markers and line ends a careless parser would cut at.
fn every_byte() -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend_from_slice(b"\r\n$5\r\n*2\r\n\r\n\n\r\0-ERR x\r\n");
    bytes.extend(0..=255u8);
    bytes
}

#[test]
fn keys_and_values_holding_every_byte_value_and_crlf_round_trip() {
    for server in servers() {
        let mut con = server.client();
        let value = every_byte();
        let key: &[u8] = b"bin:\r\n\0\xff key";
        let other_key: &[u8] = b"bin:\n";
        assert_eq!(ok(&server, &mut con, &[b"SET", key, &value]), Value::Okay);
        assert_eq!(
            ok(&server, &mut con, &[b"GET", key]),
            bulk(&value),
            "{}",
            server.name()
        );
        assert_eq!(
            ok(&server, &mut con, &[b"ECHO".as_slice(), &value]),
            bulk(&value)
        );
        assert_eq!(
            ok(&server, &mut con, &[b"PING".as_slice(), &value]),
            bulk(&value)
        );

        assert_eq!(
            ok(
                &server,
                &mut con,
                &[b"MSET", other_key, b"\r\n", key, &value[..3]]
            ),
            Value::Okay
        );
        let got = ok(&server, &mut con, &[b"MGET", key, other_key]);
        assert_eq!(
            got,
            Value::Array(vec![bulk(&value[..3]), bulk(b"\r\n")]),
            "{}",
            server.name()
        );

        let list: &[u8] = b"bin:list\r\n";
        ok(&server, &mut con, &[b"RPUSH", list, &value, b"", b"\r\n"]);
        let got = ok(
            &server,
            &mut con,
            &[b"LRANGE".as_slice(), list, b"0", b"-1"],
        );
        assert_eq!(
            got,
            Value::Array(vec![bulk(&value), bulk(b""), bulk(b"\r\n")])
        );
        assert_eq!(
            ok(&server, &mut con, &[b"LPOP".as_slice(), list]),
            bulk(&value)
        );
        assert_eq!(
            ok(&server, &mut con, &[b"DEL", key, other_key, list]),
            Value::Int(3)
        );
    }
}

/// Sizes around the powers of two from 0 B to 512 KiB, and either side of the longest
/// value the ringmem build keeps in the store's entry itself.
fn value_sizes() -> Vec<usize> {
    let inline = ringmem_resp::ringmem_mode::INLINE;
    let mut sizes = vec![0, 1, 2, 3, inline, inline + 1];
    for shift in [4, 7, 8, 10, 12, 13, 14, 15, 16, 17, 18] {
        let p = 1usize << shift;
        sizes.extend([p - 1, p, p + 1]);
    }
    sizes.extend([(1 << 19) - 1, 1 << 19]);
    sizes
}

/// A value whose bytes depend on their offset and on `seed`, so that a shifted,
/// truncated or swapped value never compares equal.
fn patterned(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn values_of_0_b_to_512_kib_round_trip_one_by_one_pipelined_and_in_a_list() {
    for server in servers() {
        let mut con = server.client();
        let sizes = value_sizes();
        for &len in &sizes {
            let key = format!("size:{len}");
            let value = patterned(len, len as u64);
            let set = ok(&server, &mut con, &[b"SET", key.as_bytes(), &value]);
            assert_eq!(set, Value::Okay, "{}: SET of {len} B", server.name());
            let Value::BulkString(got) = ok(&server, &mut con, &[b"GET", key.as_bytes()]) else {
                panic!("{}: GET of {len} B: not a bulk string", server.name());
            };
            // Not assert_eq!: a failure must not print half a megabyte.
            assert!(
                got == value,
                "{}: a value of {len} B came back as {} B, or changed",
                server.name(),
                got.len()
            );
        }
        // All of them again in one pipeline each way: large frames back to back.
        let mut set_all = redis::pipe();
        for &len in &sizes {
            set_all
                .cmd("SET")
                .arg(format!("size:{len}"))
                .arg(patterned(len, len as u64 + 1));
        }
        let _: () = set_all.query(&mut con).unwrap();
        let mut get_all = redis::pipe();
        for &len in &sizes {
            get_all.cmd("GET").arg(format!("size:{len}"));
        }
        let got: Vec<Vec<u8>> = get_all.query(&mut con).unwrap();
        for (&len, value) in sizes.iter().zip(&got) {
            assert!(
                *value == patterned(len, len as u64 + 1),
                "{}: pipelined value of {len} B came back as {} B, or changed",
                server.name(),
                value.len()
            );
        }
        // And all of them as the elements of one list, in one command each way.
        let mut rpush = redis::cmd("RPUSH");
        rpush.arg("size:list");
        for &len in &sizes {
            rpush.arg(patterned(len, len as u64 + 2));
        }
        let pushed: usize = rpush.query(&mut con).unwrap();
        assert_eq!(pushed, sizes.len(), "{}", server.name());
        let elements: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg("size:list")
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(elements.len(), sizes.len(), "{}", server.name());
        for (&len, element) in sizes.iter().zip(&elements) {
            assert!(
                *element == patterned(len, len as u64 + 2),
                "{}: a list element of {len} B came back as {} B, or changed",
                server.name(),
                element.len()
            );
        }
    }
}

#[test]
fn two_hundred_concurrent_clients_each_read_back_their_own_keys() {
    const CLIENTS: usize = 200;
    const KEYS: usize = 10;
    for server in servers() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = server.async_client();
        let name = server.name();
        runtime.block_on(async move {
            // Every client connects before any writes, and stays connected until all
            // have checked: 200 connections open at once.
            let connected = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
            let checked = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
            let mut tasks = Vec::new();
            for c in 0..CLIENTS {
                let client = client.clone();
                let (connected, checked) = (connected.clone(), checked.clone());
                tasks.push(tokio::spawn(async move {
                    let mut con = client.get_multiplexed_async_connection().await?;
                    connected.wait().await;
                    let key = |k: usize| format!("client:{c}:key:{k}");
                    let value = |k: usize| patterned(100 + c + k, (c * KEYS + k) as u64);
                    for k in 0..KEYS {
                        redis::cmd("SET")
                            .arg(key(k))
                            .arg(value(k))
                            .query_async::<()>(&mut con)
                            .await?;
                        redis::cmd("RPUSH")
                            .arg(format!("client:{c}:list"))
                            .arg(k)
                            .query_async::<()>(&mut con)
                            .await?;
                        redis::cmd("INCR")
                            .arg(format!("client:{c}:count"))
                            .query_async::<()>(&mut con)
                            .await?;
                    }
                    let mut mget = redis::cmd("MGET");
                    for k in 0..KEYS {
                        mget.arg(key(k));
                    }
                    let values: Vec<Vec<u8>> = mget.query_async(&mut con).await?;
                    for (k, v) in values.iter().enumerate() {
                        assert!(*v == value(k), "client {c}: key {k} holds another value");
                    }
                    let list: Vec<usize> = redis::cmd("LRANGE")
                        .arg(format!("client:{c}:list"))
                        .arg(0)
                        .arg(-1)
                        .query_async(&mut con)
                        .await?;
                    assert_eq!(list, (0..KEYS).collect::<Vec<_>>(), "client {c}");
                    let count: usize = redis::cmd("GET")
                        .arg(format!("client:{c}:count"))
                        .query_async(&mut con)
                        .await?;
                    assert_eq!(count, KEYS, "client {c}");
                    checked.wait().await;
                    redis::RedisResult::Ok(())
                }));
            }
            let all = join_all(tasks);
            match tokio::time::timeout(PATIENCE * 2, all).await {
                Ok(results) => {
                    for (c, result) in results.into_iter().enumerate() {
                        result
                            .unwrap_or_else(|e| panic!("{name}: client {c} panicked: {e}"))
                            .unwrap_or_else(|e| panic!("{name}: client {c}: {e}"));
                    }
                }
                Err(_) => panic!(
                    "{name}: 200 clients did not finish within {:?}",
                    PATIENCE * 2
                ),
            }
        });
        server.assert_serves("after 200 clients");
    }
}

/// Awaits every task in turn (they run concurrently all the same: they are spawned).
async fn join_all<T>(
    tasks: Vec<tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await);
    }
    results
}

#[test]
fn the_server_writes_nothing_to_stdout_after_its_listening_line() {
    // The bench and the tests read the port from stdout; diagnostics belong on stderr.
    if common::against_redis() {
        println!("redis-server logs to stdout: nothing to check");
        return;
    }
    for server in servers() {
        let mut con = server.client();
        ok(&server, &mut con, &["SET", "out:k", "v"]);
        err(&server, &mut con, &["NOSUCH", "command"]);
        let mut stream = server.raw();
        stream.write_all(b"*1\r\n$-5\r\n").unwrap();
        let _ = read_until_closed(&mut stream);
        let name = server.name();
        let more = server.stop();
        assert_eq!(String::from_utf8_lossy(&more), "", "{name}");
    }
}

#[test]
fn a_store_four_times_the_read_budget_still_reads_every_command() {
    // Issue 56: stored values may be kept in the read pool, yet a store larger than
    // the pool's budget must never stop the readers (a DEL must get through). 16 MiB
    // of 64 KiB values against a budget of 4 MiB; redis-server has no such budget
    // and runs the same commands as the reference.
    const VALUES: usize = 256;
    const SIZE: usize = 64 << 10;
    let kind = if common::against_redis() {
        Kind::Redis
    } else {
        Kind::Ringmem
    };
    let server = Server::start_with(kind, &["--budget-mib", "4"]);
    let mut con = server.client();
    let mut sets = redis::pipe();
    for i in 0..VALUES {
        sets.cmd("SET")
            .arg(format!("budget:{i}"))
            .arg(patterned(SIZE, i as u64));
    }
    let _: () = sets.query(&mut con).unwrap();
    // Another client is served with the store full.
    server.assert_serves("with a store four times the read budget");

    let mut gets = redis::pipe();
    for i in 0..VALUES {
        gets.cmd("GET").arg(format!("budget:{i}"));
    }
    let values: Vec<Vec<u8>> = gets.query(&mut con).unwrap();
    for (i, value) in values.iter().enumerate() {
        assert!(
            value == &patterned(SIZE, i as u64),
            "{}: value {i} changed",
            server.name()
        );
    }
    let mut del = redis::cmd("DEL");
    for i in (0..VALUES).step_by(2) {
        del.arg(format!("budget:{i}"));
    }
    let deleted: usize = del.query(&mut con).unwrap();
    assert_eq!(deleted, VALUES / 2, "{}", server.name());
    // And the room the DEL made is used again.
    let mut sets = redis::pipe();
    for i in (0..VALUES).step_by(2) {
        sets.cmd("SET")
            .arg(format!("budget:{i}"))
            .arg(patterned(SIZE, !(i as u64)));
    }
    let _: () = sets.query(&mut con).unwrap();
    let again: Vec<u8> = redis::cmd("GET").arg("budget:0").query(&mut con).unwrap();
    assert!(
        again == patterned(SIZE, !0),
        "{}: budget:0 after a new SET",
        server.name()
    );
    let odd: Vec<u8> = redis::cmd("GET").arg("budget:1").query(&mut con).unwrap();
    assert!(
        odd == patterned(SIZE, 1),
        "{}: budget:1 after the DEL",
        server.name()
    );
}
