//! Typed object pools (filled by the typed-pool issue).
