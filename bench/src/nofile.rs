//! The descriptor limit (`RLIMIT_NOFILE`) of processes that hold thousands of
//! connections: the conns child, the server scenario's idle clients, and the servers
//! that scenario starts (they inherit the limit of the process that starts them).

/// The limit asked for first: room for 10,000 connections and their clients' (in one
/// process, two descriptors a connection).
const WANTED: libc::rlim_t = 1 << 16;

/// Raises this process's limit of open descriptors to [`WANTED`] where it may (a
/// privileged process raises its hard limit too), else its soft limit to its hard
/// limit; returns the limit in force.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `rlimit` for the call's whole duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_max < WANTED {
        let wanted = libc::rlimit {
            rlim_cur: WANTED,
            rlim_max: WANTED,
        };
        // SAFETY: `wanted` is a valid `rlimit` read by the call only.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0 {
            lim = wanted;
        }
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid `rlimit` read by the call only.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    // `rlim_t` is not 64 bits on every target.
    #[allow(clippy::unnecessary_cast)]
    let limit = lim.rlim_cur as u64;
    limit
}
