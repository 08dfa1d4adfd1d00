//! Symbols: instruction pointers to frames, on the analysis thread (it allocates and reads debug
//! info; never in a handler or on a worker).

use std::collections::HashMap;

use super::reason::module_path;
use crate::event::Frame;
use crate::poll::locks::HeldEntry;

/// Turns instruction pointers into frames, remembering each address it has resolved. Runs on
/// the sink thread.
#[derive(Default)]
pub(crate) struct Resolver {
    cache: HashMap<usize, Vec<Frame>>,
}

impl Resolver {
    /// Frames for `ips`, innermost first. One address can give several frames (inlined calls).
    pub(crate) fn resolve(&mut self, ips: &[usize]) -> Vec<Frame> {
        let mut out = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            // Return addresses point after the call; look up the call itself (the innermost
            // frame's address is where the thread was interrupted, exact).
            let lookup = if i == 0 { ip } else { ip.saturating_sub(1) };
            let mut frames = self.lookup(lookup);
            if i == 0 && frames[0].line.is_none() && frames[0].function.is_some() {
                // The interrupted instruction has no source line of its own (DWARF line 0:
                // code the compiler made, e.g. a loop's bookkeeping): it belongs to the
                // statement before it. Take the nearest preceding instruction of the same
                // function that has a line.
                if let Some(better) = (1..=MAX_BACKSTEP)
                    .map(|back| self.lookup(ip.saturating_sub(back)))
                    .take_while(|f| f[0].function == frames[0].function)
                    .find(|f| f[0].line.is_some())
                {
                    frames = better;
                }
            }
            out.extend(frames);
        }
        qualify_inlined(&mut out);
        out
    }
}

impl Resolver {
    /// The frames at `addr` (several when calls were inlined), innermost first; never empty.
    fn lookup(&mut self, addr: usize) -> Vec<Frame> {
        self.cache
            .entry(addr)
            .or_insert_with(|| {
                let mut frames = Vec::new();
                backtrace::resolve(addr as *mut std::ffi::c_void, |sym| {
                    frames.push(Frame {
                        function: sym.name().map(|n| format!("{n:#}")),
                        file: sym.filename().map(|f| f.display().to_string()),
                        line: sym.lineno(),
                        locks: 0,
                    });
                });
                if frames.is_empty() {
                    frames.push(Frame::default());
                }
                frames
            })
            .clone()
    }
}

/// How many bytes before an interrupted instruction with no source line to look for one.
const MAX_BACKSTEP: usize = 64;

/// An inlined closure, async block or `async fn` body is named by its debug info without a
/// path (`{async_block#1}`, `{async_fn#0}<alloc::string::String>`). The frames that poll it
/// often name its environment type with the full path in their generic arguments
/// (`…<app::handler::{async_block_env#1}, …>`): borrow that path. When none does (an `async fn`
/// awaited directly; a line-tables-only build keeps no namespaces), the file says the crate and
/// module (`dep::session::{async_fn#0}`). The generic arguments are dropped: the path says whose
/// code it is, and they made the name say another crate's.
fn qualify_inlined(frames: &mut [Frame]) {
    const KINDS: [(&str, &str); 3] = [
        ("{async_block#", "{async_block_env#"),
        ("{closure#", "{closure_env#"),
        ("{async_fn#", "{async_fn_env#"),
    ];
    for i in 0..frames.len() {
        let Some(name) = frames[i].function.as_deref() else {
            continue;
        };
        let base = name.split('<').next().unwrap_or(name);
        let Some(env) = KINDS
            .iter()
            .find_map(|(kind, env)| base.strip_prefix(kind).map(|rest| format!("{env}{rest}")))
        else {
            continue;
        };
        if base.contains("::") {
            continue;
        }
        let base = base.to_owned();
        let path = frames[i + 1..].iter().find_map(|outer| {
            let outer = outer.function.as_deref()?;
            let pos = outer.find(&format!("::{env}"))?;
            let start = outer[..pos]
                .rfind(['<', ' ', ',', '(', '&', '['])
                .map_or(0, |p| p + 1);
            Some(outer[start..pos].to_owned())
        });
        let path = path.or_else(|| frames[i].file.as_deref().and_then(module_path));
        if let Some(path) = path {
            frames[i].function = Some(format!("{path}::{base}"));
        }
    }
}

/// Marks, in `frames`, the frames that took the held locks (`<== locks:N`). A lock's frame is
/// the frame of its acquisition file that has run the fewest lines past the acquisition line:
/// the function that took the lock and is still inside the guard's scope.
pub(crate) fn mark_lock_frames(frames: &mut [Frame], held: &[HeldEntry]) {
    for lock in held {
        let site = lock.site;
        let same_file = |f: &Frame| {
            f.file
                .as_deref()
                .is_some_and(|file| file.ends_with(site.file()) || site.file().ends_with(file))
        };
        if let Some(f) = frames
            .iter_mut()
            .filter(|f| same_file(f) && f.line.is_some_and(|l| l >= site.line()))
            .min_by_key(|f| f.line.unwrap_or(u32::MAX) - site.line())
        {
            f.locks += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str) -> Frame {
        Frame::named(n)
    }

    #[test]
    fn inlined_blocks_borrow_their_path() {
        let mut frames = vec![
            named("std::thread::sleep"),
            named("{async_block#1}"),
            named("{closure#0}<app::lock_sleep::{async_fn#0}::{closure#0}::{async_block_env#1}, alloc::sync::Arc<tokio::X>>"),
            named("{closure#1}"),
            named("call_once<app::lazy::{async_fn#0}::{closure_env#1}, ()>"),
            named("{async_block#7}"),
        ];
        qualify_inlined(&mut frames);
        let names: Vec<_> = frames.iter().map(|f| f.function.clone().unwrap()).collect();
        assert_eq!(
            names[1],
            "app::lock_sleep::{async_fn#0}::{closure#0}::{async_block#1}"
        );
        assert_eq!(names[3], "app::lazy::{async_fn#0}::{closure#1}");
        // Nothing outer names it, and no file: left alone.
        assert_eq!(names[5], "{async_block#7}");
        assert_eq!(names[0], "std::thread::sleep");
    }

    /// An `async fn` awaited directly leaves no env type in outer frames: its file names it.
    #[test]
    fn an_inlined_async_fn_body_is_named_after_its_file() {
        let mut frames = vec![
            named("std::thread::sleep"),
            Frame {
                function: Some("{async_fn#0}<alloc::string::String>".into()),
                file: Some(
                    "/h/.cargo/registry/src/index.crates.io-x/snmp2-0.4.1/src/asyncsession.rs"
                        .into(),
                ),
                line: Some(120),
                locks: 0,
            },
            named("app::poll_devices::{async_fn#0}"),
        ];
        qualify_inlined(&mut frames);
        assert_eq!(
            frames[1].function.as_deref(),
            Some("snmp2::asyncsession::{async_fn#0}")
        );
    }
}
