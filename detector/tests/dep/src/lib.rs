//! A library with a bug users meet in real crates: a generic `async fn` that blocks its worker.
//! Its code is instantiated and inlined in the caller's crate, and its debug info names the
//! inlined body `{async_fn#0}<alloc::string::String>`, without a path of its own.

use std::time::Duration;

/// A connection to some peer.
#[derive(Debug)]
pub struct Session {
    /// The address it was made for.
    pub addr: String,
}

/// The line of [`Session::new`] that blocks.
pub const BLOCKING_LINE: u32 = 29;

impl Session {
    /// Makes a session for `addr`, blocking the calling thread for `handshake` first (as a
    /// blocking resolver or `std::thread::sleep` in a library does).
    pub async fn new<A>(addr: A, handshake: Duration) -> Session
    where
        A: Into<String>,
    {
        let addr = addr.into();
        if addr.is_empty() {
            return Session { addr };
        }
        // The blocking line (`BLOCKING_LINE`): keep the two in step.
        std::thread::sleep(std::hint::black_box(handshake));
        Session { addr }
    }
}
