//! `ringmem-resp`: a Redis-protocol server on ringmem (work in progress, issue 56).

fn main() {
    eprintln!("ringmem-resp: not built yet");
    std::process::exit(2);
}
