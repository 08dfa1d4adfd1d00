//! Stack samples of a pinned worker (filled in by the stack issue).

use crate::slot::Slot;
use crate::Error;

pub(crate) fn install_handler() -> Result<(), Error> {
    Ok(())
}

pub(crate) fn sample(_slot: &Slot, _tid: i32) -> Option<Vec<usize>> {
    None
}

/// Turns instruction pointers into frames, remembering each address it has resolved. Runs on
/// the sink thread.
#[derive(Default)]
pub(crate) struct Resolver {
    cache: std::collections::HashMap<usize, Vec<crate::event::Frame>>,
}

impl Resolver {
    /// Frames for `ips`, innermost first. One address can give several frames (inlined calls).
    pub(crate) fn resolve(&mut self, ips: &[usize]) -> Vec<crate::event::Frame> {
        let mut out = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            // Return addresses point after the call; look up the call itself (the innermost
            // frame's address is where the thread was interrupted, exact).
            let lookup = if i == 0 { ip } else { ip.saturating_sub(1) };
            let frames = self.cache.entry(lookup).or_insert_with(|| {
                let mut frames = Vec::new();
                backtrace::resolve(lookup as *mut std::ffi::c_void, |sym| {
                    frames.push(crate::event::Frame {
                        function: sym.name().map(|n| format!("{n:#}")),
                        file: sym.filename().map(|f| f.display().to_string()),
                        line: sym.lineno(),
                        locks: 0,
                    });
                });
                if frames.is_empty() {
                    frames.push(crate::event::Frame::default());
                }
                frames
            });
            out.extend(frames.iter().cloned());
        }
        out
    }
}

pub(crate) fn mark_lock_frames(
    _frames: &mut [crate::event::Frame],
    _held: &[crate::sync::HeldRaw],
) {
}
