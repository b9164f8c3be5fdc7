//! Whether a section was measured while other work ran on the machine: read before
//! and after each section, so its tables can say so.
//!
//! The 1-minute load average is printed but does not decide. It counts this
//! benchmark's own threads and child processes, which keep every CPU busy in some
//! sections (the busy scenario adds a busy process per CPU on purpose), and it lags
//! a minute, so before a section it still holds the section that ran before. What
//! decides is the CPU time the machine spent over the section less this process's own
//! and its children's: the work of other processes, which took its CPU time from the
//! benchmark's.

/// The share of the machine's CPU time other processes may take during a section
/// before its figures are marked: a quarter. Background daemons take a few percent;
/// a quarter on a machine whose every CPU the benchmark keeps busy slows its threads
/// by about as much, more than the spread of a cell's repetitions.
const MAX_OTHERS: f64 = 0.25;

/// CPU time in clock ticks, all counters since boot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cpu {
    /// The machine's, all CPUs, busy: user, nice, system and steal (a hypervisor
    /// running another machine on this one's CPUs). Interrupt time is left out:
    /// the kernel may count the interrupts of this process's own loopback traffic
    /// there and not in the process's time.
    pub busy: u64,
    /// The machine's, all CPUs, busy or idle.
    pub total: u64,
    /// This process's, user and system, with its children that have ended and been
    /// waited for (every scenario waits for the children it starts).
    pub own: u64,
}

/// The machine before or after a section.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// The 1-minute load average (`/proc/loadavg`).
    pub load: Option<f64>,
    /// CPU time (`/proc/stat`, `/proc/self/stat`).
    pub cpu: Option<Cpu>,
}

/// The machine now; `None` for what cannot be read (no `/proc`).
pub fn read() -> Reading {
    let load = std::fs::read_to_string("/proc/loadavg").ok();
    Reading {
        load: load.and_then(|s| s.split_whitespace().next()?.parse().ok()),
        cpu: cpu(),
    }
}

fn cpu() -> Option<Cpu> {
    let (busy, total) = machine(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let own = own(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(Cpu { busy, total, own })
}

/// Busy and total ticks from the `cpu` line of `/proc/stat`.
fn machine(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = f[..] else {
        return None;
    };
    let busy = user + nice + system + steal;
    Some((busy, busy + idle + iowait + irq + softirq))
}

/// utime + stime + cutime + cstime from `/proc/self/stat` (fields 14 to 17; the
/// command's name, field 2, may hold spaces, so fields count from its `)`).
fn own(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f.get(11..15)?.iter().map(|v| v.parse::<u64>().ok()).sum()
}

/// The share of the machine's CPU time that other processes took between `before` and
/// `after` (0 to 1); `None` if either reading has no CPU time.
fn others(before: Reading, after: Reading) -> Option<f64> {
    let (b, a) = (before.cpu?, after.cpu?);
    let total = a.total.checked_sub(b.total).filter(|&t| t > 0)?;
    let busy = a.busy.saturating_sub(b.busy);
    let own = a.own.saturating_sub(b.own);
    Some(busy.saturating_sub(own) as f64 / total as f64)
}

/// The load a section was measured under.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// Other processes took at most [`MAX_OTHERS`] of the CPU time.
    Quiet,
    /// They took more: this share of it, with the load averages before and after.
    Under {
        share: f64,
        before: Option<f64>,
        after: Option<f64>,
    },
    /// The CPU time could not be read.
    Unknown,
}

impl Load {
    /// The note a section's tables and verdicts carry when it was under load:
    /// `measured under load: other processes took 40 % of the CPU time; load average
    /// 2.10 before, 3.50 after`.
    pub fn note(&self) -> Option<String> {
        Some(format!(
            "measured under load: other processes took {}",
            self.detail()?
        ))
    }

    /// What a table's notes say of the load, whatever it was: `measured while the
    /// machine was quiet (...)`, `measured under load: ...` (as [`Load::note`] says), or
    /// `not checked for load (...)`.
    pub fn phrase(&self) -> String {
        match self {
            Load::Quiet => format!(
                "measured while the machine was quiet (other processes took at most {:.0} % of \
                 the CPU time)",
                MAX_OTHERS * 100.0
            ),
            Load::Under { .. } => self.note().unwrap_or_default(),
            Load::Unknown => "not checked for load (no `/proc/stat`)".into(),
        }
    }

    /// `40 % of the CPU time; load average 2.10 before, 3.50 after`.
    fn detail(&self) -> Option<String> {
        let Load::Under {
            share,
            before,
            after,
        } = *self
        else {
            return None;
        };
        let load = |l: Option<f64>| l.map_or("unknown".into(), |l| format!("{l:.2}"));
        Some(format!(
            "{:.0} % of the CPU time; load average {} before, {} after",
            share * 100.0,
            load(before),
            load(after)
        ))
    }
}

/// The load of a section measured between `before` and `after`.
pub fn under_load(before: Reading, after: Reading) -> Load {
    match others(before, after) {
        None => Load::Unknown,
        Some(share) if share <= MAX_OTHERS => Load::Quiet,
        Some(share) => Load::Under {
            share,
            before: before.load,
            after: after.load,
        },
    }
}

/// The run's last word on load: which sections (`(id, its load)`) were measured under
/// load, or that none was.
pub fn summary(sections: &[(&str, Load)]) -> String {
    let loaded: Vec<String> = sections
        .iter()
        .filter_map(|(id, l)| Some(format!("{id} ({})", l.detail()?)))
        .collect();
    let share = MAX_OTHERS * 100.0;
    if !loaded.is_empty() {
        format!(
            "Measured under load (other processes took more than {share:.0} % of the CPU time; \
             the tables say so in their titles): {}.",
            loaded.join("; ")
        )
    } else if sections.iter().any(|(_, l)| *l == Load::Unknown) {
        "Load not measured (no `/proc/stat`): the tables may have been measured under load.".into()
    } else {
        format!(
            "No section was measured under load (other processes took at most {share:.0} % of \
             the CPU time in each)."
        )
    }
}

/// Nanoseconds a cache line takes to go from one thread to another and back: two
/// threads hand one atomic word to each other `turns` times; the median over batches
/// of 100 turns (a batch the scheduler interrupted does not count), per turn. `None`
/// on one CPU, where a turn would be a time slice. On a VM it moves with where the host
/// puts the two vCPUs, and the rows whose buffers carry a word their consumer writes
/// back (a ring's header) move with it; the bounded control's packed flags do not.
pub fn round_trip(turns: u64) -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const BATCH: u64 = 100;
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    let turns = turns.div_ceil(BATCH) * BATCH;
    let word = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..turns {
                while word.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                word.store(2 * i + 2, Ordering::Release);
            }
        });
        let mut batches = Vec::with_capacity((turns / BATCH) as usize);
        for b in 0..turns / BATCH {
            let start = std::time::Instant::now();
            for i in b * BATCH..(b + 1) * BATCH {
                word.store(2 * i + 1, Ordering::Release);
                while word.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            batches.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        }
        crate::harness::spread(&batches).map(|s| s.median)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(load: f64, busy: u64, total: u64, own: u64) -> Reading {
        Reading {
            load: Some(load),
            cpu: Some(Cpu { busy, total, own }),
        }
    }

    #[test]
    fn the_proc_files_read_as_the_kernel_writes_them() {
        let stat = "cpu  5404414 21117 1571487 3509755 17054 0 411152 7516 0 0\n\
                    cpu0 1 2 3 4 5 6 7 8 0 0\n";
        let busy = 5404414 + 21117 + 1571487 + 7516;
        assert_eq!(machine(stat), Some((busy, busy + 3509755 + 17054 + 411152)));
        let own_stat = "32668 (a (b) c) R 32664 32664 15292 0 -1 4194304 101 0 0 0 \
                        70 30 12 8 20 0 1 0 5503738 3133440 389";
        assert_eq!(own(own_stat), Some(120));
        assert_eq!(machine("intr 1 2 3"), None);
        assert_eq!(own("32668 (cat) R 1 2"), None);
    }

    #[test]
    fn a_section_busy_with_its_own_work_is_not_under_load() {
        // Both CPUs busy for 10 s (2,000 ticks), all of it the benchmark's, behind a
        // load average the busy scenario left high.
        let before = reading(4.0, 1_000, 10_000, 500);
        let after = reading(4.5, 2_900, 12_000, 2_350);
        assert_eq!(under_load(before, after), Load::Quiet);
    }

    #[test]
    fn other_work_marks_a_section_under_load() {
        // 2,000 ticks, 1,900 busy, 1,100 of them the benchmark's: others took 40 %.
        let before = reading(0.5, 1_000, 10_000, 500);
        let after = reading(2.6, 2_900, 12_000, 1_600);
        assert_eq!(
            under_load(before, after).note().unwrap(),
            "measured under load: other processes took 40 % of the CPU time; load average \
             0.50 before, 2.60 after"
        );
        // Exactly a quarter is not yet load.
        let after = reading(2.6, 2_900, 12_000, 1_900);
        assert_eq!(under_load(before, after), Load::Quiet);
    }

    #[test]
    fn without_cpu_time_the_load_is_unknown() {
        let before = Reading {
            load: Some(3.0),
            cpu: None,
        };
        let after = reading(3.0, 2_900, 12_000, 1_600);
        assert_eq!(under_load(before, after), Load::Unknown);
        assert_eq!(
            under_load(Reading::default(), Reading::default()),
            Load::Unknown
        );
    }

    #[test]
    fn the_summary_names_the_sections_under_load() {
        let under = Load::Under {
            share: 0.4,
            before: Some(0.5),
            after: None,
        };
        assert_eq!(Load::Quiet.note(), None);
        assert_eq!(
            summary(&[("framed", Load::Quiet), ("conns", under)]),
            "Measured under load (other processes took more than 25 % of the CPU time; the \
             tables say so in their titles): conns (40 % of the CPU time; load average 0.50 \
             before, unknown after)."
        );
        assert!(summary(&[("framed", Load::Quiet)]).starts_with("No section was measured"));
        assert!(
            summary(&[("framed", Load::Quiet), ("conns", Load::Unknown)]).starts_with("Load not")
        );
    }

    #[test]
    fn a_round_trip_takes_some_time_on_two_cpus() {
        match round_trip(100) {
            Some(ns) => assert!(ns > 1.0 && ns < 1e7, "{ns} ns"),
            None => assert!(std::thread::available_parallelism().map_or(1, |n| n.get()) < 2),
        }
    }
}
