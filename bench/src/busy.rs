//! Busy neighbours: processes that compete for the CPUs while a run is timed, one per
//! core, each this executable started with [`CHILD_FLAG`] and spinning on integer
//! arithmetic until it is killed. [`Neighbours`] starts them and, when dropped (at the
//! end of the run, or while a panic unwinds), kills them and waits for them.
//!
//! A neighbour also exits by itself when its parent goes however it ends (even killed
//! outright, when no `Drop` runs): it watches its stdin, a pipe whose other end only
//! the parent holds, and the pipe closes with the parent.

use std::io::{self, Read, Write};
use std::process::{Child, Command, Stdio};

/// The hidden command-line flag that makes this executable a busy neighbour.
pub const CHILD_FLAG: &str = "--busy-child";

/// Running busy neighbours; dropping this kills them and waits for them.
pub struct Neighbours {
    children: Vec<Child>,
}

impl Neighbours {
    /// Starts `n` busy neighbours and returns once each has begun to spin (it says so
    /// on its stdout).
    pub fn start(n: usize) -> io::Result<Neighbours> {
        let exe = std::env::current_exe()?;
        // Each child joins the guard as soon as it exists, so that an error below
        // still ends the ones already started.
        let mut guard = Neighbours {
            children: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let child = Command::new(&exe)
                .arg(CHILD_FLAG)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
            guard.children.push(child);
        }
        for child in &mut guard.children {
            let mut ready = [0u8; 1];
            match child.stdout.as_mut() {
                Some(out) => out.read_exact(&mut ready)?,
                None => return Err(io::Error::other("a busy neighbour has no stdout")),
            }
        }
        Ok(guard)
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        // Errors are ignored: a child that already exited cannot be killed, and a drop
        // must not panic (it may run while a panic unwinds).
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// The busy neighbour's `main`: says it is ready, then spins on integer arithmetic
/// until it is killed or its parent's end of its stdin closes.
pub fn child() -> ! {
    std::thread::spawn(|| {
        // Returns when the parent's end of the pipe closes: the parent is gone or
        // done with this neighbour. The parent never writes.
        let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
        std::process::exit(0);
    });
    let mut out = io::stdout().lock();
    if out.write_all(b"+").and_then(|()| out.flush()).is_err() {
        std::process::exit(1);
    }
    // A multiply-add per step (an LCG): all integer work, no memory traffic, and
    // `black_box` keeps the compiler from folding the loop away.
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x)
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary is not the bench: started with the flag it runs its tests
    /// (and fails on the unknown flag), so the neighbours here are shells that spin.
    #[test]
    fn dropping_the_guard_ends_the_neighbours() {
        let mut guard = Neighbours {
            children: Vec::new(),
        };
        for _ in 0..2 {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::piped())
                .spawn()
                .expect("sh");
            guard.children.push(child);
        }
        let pids: Vec<u32> = guard.children.iter().map(Child::id).collect();
        drop(guard);
        for pid in pids {
            // Waited for: no zombie left, the process is gone.
            assert!(
                !std::path::Path::new(&format!("/proc/{pid}")).exists(),
                "neighbour {pid} still there"
            );
        }
    }
}
