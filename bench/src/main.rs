//! The comparison binary (filled by the benchmark issue).
fn main() {
    println!("ringmem-bench: comparison not written yet");
}
