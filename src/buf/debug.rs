//! `Debug` for the byte buffers: the bytes as a byte-string literal, as `bytes::Bytes`
//! prints them, capped so that a large frame does not flood a log.

use core::fmt::{self, Write};

/// Bytes shown when the format asks for no precision: enough for a request line or a
/// protocol header, small enough for one log line.
const SHOWN: usize = 64;

/// Writes `bytes` as `b"..."`, escaped as a Rust byte-string literal. Past the first
/// [`SHOWN`] bytes (or as many as the format's precision says, `{:.1000?}`), it stops
/// with `...` and the total length, so a capped line never reads as the whole buffer.
pub(super) fn bytes(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let shown = f.precision().unwrap_or(SHOWN).min(bytes.len());
    f.write_str("b\"")?;
    for &b in &bytes[..shown] {
        match b {
            b'\n' => f.write_str("\\n")?,
            b'\r' => f.write_str("\\r")?,
            b'\t' => f.write_str("\\t")?,
            b'\0' => f.write_str("\\0")?,
            b'"' | b'\\' => {
                f.write_char('\\')?;
                f.write_char(char::from(b))?;
            }
            // Printable ASCII, the space included.
            0x20..=0x7e => f.write_char(char::from(b))?,
            _ => write!(f, "\\x{b:02x}")?,
        }
    }
    f.write_char('"')?;
    if shown < bytes.len() {
        write!(f, "... ({} bytes)", bytes.len())?;
    }
    Ok(())
}
