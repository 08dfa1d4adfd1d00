//! Symbols: instruction pointers to frames, on the analysis thread (it allocates and reads debug
//! info; never in a handler or on a worker).
//!
//! Lazily: a file is mapped when an address in it first needs a name, and of its DWARF only
//! the unit, line sequence and function that hold the address are read ([`super::dwarf`]).
//! The program and any library with DWARF of its own give function, file, line and inlined
//! frames; other shared libraries (libc) a name from their symbol table — their separate debug
//! file's `.symtab` when one is installed by build id, else their `.dynsym` — and never their
//! separate DWARF (libc's is compressed: reading it cost 30 MiB).

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::PathBuf;

use super::dwarf::Dwarf;
use super::elf::{debug_file_by_build_id, Elf, Mmap};
use super::reason::module_path;
use crate::event::Frame;
use crate::poll::locks::HeldEntry;

/// How many addresses' frames are remembered. A long-running service that pins at ever new
/// addresses starts over when this many are cached, so the cache never grows without bound.
const MAX_CACHED: usize = 4096;

/// Turns instruction pointers into frames, remembering each address it has resolved (up to
/// [`MAX_CACHED`]). Runs on the sink thread.
pub(crate) struct Resolver {
    cache: HashMap<usize, Vec<Frame>>,
    /// How many addresses `cache` holds at most: [`MAX_CACHED`] (a test's is smaller).
    max_cached: usize,
    images: Vec<Image>,
    /// Whether a lookup since the last `resolve` read the files.
    read_files: bool,
}

impl Default for Resolver {
    fn default() -> Resolver {
        Resolver {
            cache: HashMap::new(),
            max_cached: MAX_CACHED,
            images: Vec::new(),
            read_files: false,
        }
    }
}

impl Resolver {
    /// Frames for `ips`, innermost first. One address can give several frames (inlined calls).
    pub(crate) fn resolve(&mut self, ips: &[usize]) -> Vec<Frame> {
        let mut out = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            // Return addresses point after the call; look up the call itself (the innermost
            // frame's address is where the thread was interrupted; `symbolize` looks at the
            // byte before each address besides).
            let lookup = if i == 0 { ip } else { ip.saturating_sub(1) };
            let mut frames = self.lookup(lookup);
            if i == 0
                && frames[0].line.is_none()
                && frames[0].file.is_some()
                && frames[0].function.is_some()
            {
                // The interrupted instruction has no source line of its own (DWARF line 0:
                // code the compiler made, e.g. a loop's bookkeeping): it belongs to the
                // statement before it. Take the nearest preceding instruction of the same
                // function that has a line. (A frame named from a symbol table, with no file,
                // has no lines to find.)
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
        if std::mem::take(&mut self.read_files) {
            // What the lookups read of the files is in the page cache: the process need not
            // keep it mapped (its resident set would grow by every page of DWARF it read).
            for image in &self.images {
                if let Some(Some(opened)) = &image.file {
                    opened.map.release();
                    if let Some(debug) = &opened.debug {
                        debug.release();
                    }
                }
            }
        }
        out
    }
}

impl Resolver {
    /// The frames at `addr` (several when calls were inlined), innermost first; never empty.
    fn lookup(&mut self, addr: usize) -> Vec<Frame> {
        if let Some(frames) = self.cache.get(&addr) {
            return frames.clone();
        }
        self.read_files = true;
        let mut frames = self.symbolize(addr);
        if frames.is_empty() {
            frames.push(Frame::default());
        }
        if self.cache.len() >= self.max_cached {
            self.cache.clear();
        }
        self.cache.insert(addr, frames.clone());
        frames
    }

    fn symbolize(&mut self, addr: usize) -> Vec<Frame> {
        // `backtrace::resolve`, which this replaces, took every address for a return address
        // and looked up the byte before it; the frames (and the back-step above, tuned on
        // them) stay as they were: for a thread stopped in a system call the interrupted
        // address follows the `syscall` instruction, and the byte before is in it.
        let addr = addr.saturating_sub(1);
        let found = match self.images.iter().position(|i| i.holds(addr)) {
            Some(i) => Some(i),
            None => {
                // A library loaded since the last look (or the first lookup).
                self.refresh_images();
                self.images.iter().position(|i| i.holds(addr))
            }
        };
        let from_image = found
            .map(|i| self.images[i].frames(addr))
            .unwrap_or_default();
        if !from_image.is_empty() {
            return from_image;
        }
        dladdr_name(addr)
            .map(|name| {
                vec![Frame {
                    function: Some(name),
                    ..Frame::default()
                }]
            })
            .unwrap_or_default()
    }

    /// Lists the loaded objects again, keeping the ones already opened.
    fn refresh_images(&mut self) {
        let mut now = loaded_objects();
        for image in &mut now {
            if let Some(k) = self
                .images
                .iter()
                .position(|old| old.bias == image.bias && old.path == image.path)
            {
                *image = self.images.swap_remove(k);
            }
        }
        self.images = now;
    }
}

/// One loaded object (the program or a shared library).
struct Image {
    /// The file (`/proc/self/exe` for the program); `None` for the vDSO.
    path: Option<PathBuf>,
    main: bool,
    /// Load bias: file address = runtime address - bias.
    bias: usize,
    /// Its loaded segments, runtime addresses.
    segments: Vec<(usize, usize)>,
    /// The build id in the loaded image's notes: the file at `path` is read only if it has
    /// the same (a library replaced on disk since it was loaded is another file).
    loaded_id: Option<Vec<u8>>,
    /// Mapped on first use (`Some(None)`: could not be read).
    file: Option<Option<Opened>>,
}

/// A mapped file with what was found in it. Field order is drop order: what borrows the
/// mappings goes first.
struct Opened {
    dwarf: Option<Dwarf>,
    /// The separate debug file, by build id (for its symbol table, or the program's DWARF).
    debug: Option<Mmap>,
    map: Mmap,
}

impl Image {
    fn holds(&self, addr: usize) -> bool {
        self.segments.iter().any(|&(b, e)| b <= addr && addr < e)
    }

    fn frames(&mut self, addr: usize) -> Vec<Frame> {
        let main = self.main;
        let opened = self.file.get_or_insert_with(|| {
            let path = self.path.as_deref()?;
            open(path, main, self.loaded_id.as_deref())
        });
        let Some(opened) = opened else {
            return Vec::new();
        };
        let probe = (addr.wrapping_sub(self.bias)) as u64;
        let raw = opened
            .dwarf
            .as_mut()
            .map(|d| d.frames(probe))
            .unwrap_or_default();
        // The symbol holding the probe: a scan of the symbol table, done once, and only when a
        // frame needs it.
        let opened: &Opened = opened;
        let mut symbol = None;
        let mut symbol = || *symbol.get_or_insert_with(|| opened.symbol(probe));
        if raw.is_empty() {
            return symbol()
                .map(demangle)
                .map(|name| {
                    vec![Frame {
                        function: Some(name),
                        ..Frame::default()
                    }]
                })
                .unwrap_or_default();
        }
        raw.into_iter()
            .map(|f| {
                let from_dwarf = f.name.map(|n| demangle(n.slice()));
                // Line tables only (the `line-tables-only` debug level) name most functions by
                // their plain name (`run_task`, `poll<…>`): the symbol table names the function
                // the probe is in with its path (`tokio::…::Context::run_task`), as full debug
                // info does. A closure's DWARF name has its path, and says which block it is;
                // another language's function keeps its debug-info name.
                let function = match from_dwarf {
                    Some(n) if f.plain_outer && !has_path(&n) => {
                        symbol().and_then(rust_name).or(Some(n))
                    }
                    Some(n) => Some(n),
                    None => symbol().map(demangle),
                };
                Frame {
                    function,
                    file: f.file,
                    line: f.line,
                    locks: 0,
                }
            })
            .collect()
    }
}

/// A Rust symbol's name, demangled without its hash; `None` for another language's, whose debug
/// info names it better (a C function's symbol can be `scale.constprop.0`, helper-68).
fn rust_name(raw: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(raw);
    rustc_demangle::try_demangle(&s)
        .ok()
        .map(|d| format!("{d:#}"))
}

/// Whether a function's name has a path (`a::b`, `<T as a::Tr>::f`), not counting what its
/// generic arguments say (`poll<a::B>` has none).
fn has_path(name: &str) -> bool {
    let before_generics = match name.find('<') {
        Some(0) => return name.contains(">::"),
        Some(i) => &name[..i],
        None => name,
    };
    before_generics.contains("::")
}

/// Maps the file at `path` and reads its DWARF index: the program's DWARF (its own, or its
/// separate debug file's, compressed or not), a library's only when it has its own, uncompressed.
///
/// `loaded_id`: the build id of the image in memory; a file with another (or none) is not the
/// one loaded — replaced on disk since — and is not read (its names would be another build's):
/// the caller falls back to the dynamic linker's names.
fn open(path: &std::path::Path, main: bool, loaded_id: Option<&[u8]>) -> Option<Opened> {
    let map = Mmap::open(path)?;
    let elf = Elf::parse(map.bytes())?;
    if let Some(id) = loaded_id {
        if elf.build_id() != Some(id) {
            return None;
        }
    }
    let debug = elf
        .build_id()
        .and_then(debug_file_by_build_id)
        .and_then(|p| Mmap::open(&p))
        .filter(|m| Elf::parse(m.bytes()).is_some());
    let dwarf = if elf.has_dwarf() && (main || !elf.dwarf_compressed()) {
        // SAFETY: `map` is kept in the same `Opened`, dropped after `dwarf`.
        unsafe { Dwarf::load(&elf) }
    } else {
        let debug_elf = debug.as_ref().and_then(|m| Elf::parse(m.bytes()));
        match debug_elf {
            // SAFETY: `debug` is kept in the same `Opened`, dropped after `dwarf`.
            Some(d) if main && d.has_dwarf() => unsafe { Dwarf::load(&d) },
            _ => None,
        }
    };
    Some(Opened { dwarf, debug, map })
}

impl Opened {
    /// The symbol holding `probe`: from the file's own `.symtab`, else its separate debug
    /// file's, else its `.dynsym`.
    fn symbol(&self, probe: u64) -> Option<&[u8]> {
        let elf = Elf::parse(self.map.bytes())?;
        if !elf.has_symtab() {
            if let Some(name) = self
                .debug
                .as_ref()
                .and_then(|m| Elf::parse(m.bytes()))
                .filter(Elf::has_symtab)
                .and_then(|d| d.symbol(probe))
            {
                return Some(name);
            }
        }
        elf.symbol(probe)
    }
}

/// A symbol's name as `backtrace` printed it with `{:#}`: Rust names demangled without their
/// hash, others as they are.
fn demangle(raw: &[u8]) -> String {
    rust_name(raw).unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned())
}

/// The loaded objects (none where stacks are never sampled: 32-bit targets).
#[cfg(not(target_pointer_width = "64"))]
fn loaded_objects() -> Vec<Image> {
    Vec::new()
}

/// The loaded objects, from the dynamic linker.
#[cfg(target_pointer_width = "64")]
fn loaded_objects() -> Vec<Image> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Vec` passed below, alive and not otherwise borrowed during
        // the iteration; `info` is valid for this call (the dynamic linker's contract).
        let (out, info) = unsafe { (&mut *data.cast::<Vec<Image>>(), &*info) };
        let first = out.is_empty();
        let bias = info.dlpi_addr as usize;
        let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: the linker gives `dlpi_phnum` headers at `dlpi_phdr`.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let loaded_id = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_NOTE)
            .find_map(|p| {
                let start = bias.wrapping_add(p.p_vaddr as usize);
                // SAFETY: a PT_NOTE segment lies inside the object's loaded image (the
                // linker maps it with its PT_LOAD segment), readable while the object is
                // loaded, which it is during this call.
                let notes =
                    unsafe { std::slice::from_raw_parts(start as *const u8, p.p_memsz as usize) };
                gnu_build_id(notes)
            });
        let segments = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| {
                let start = bias.wrapping_add(p.p_vaddr as usize);
                (start, start.wrapping_add(p.p_memsz as usize))
            })
            .collect();
        let name = if info.dlpi_name.is_null() {
            Vec::new()
        } else {
            // SAFETY: a NUL-terminated string owned by the linker, valid for this call.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .to_vec()
        };
        // The program comes first, with an empty name; the vDSO has a name that is no file.
        let (path, main) = if first && name.is_empty() {
            (Some(PathBuf::from("/proc/self/exe")), true)
        } else if name.starts_with(b"/") {
            use std::os::unix::ffi::OsStringExt;
            (
                Some(PathBuf::from(std::ffi::OsString::from_vec(name))),
                false,
            )
        } else {
            (None, false)
        };
        out.push(Image {
            path,
            main,
            bias,
            segments,
            loaded_id,
            file: None,
        });
        0
    }
    let mut out: Vec<Image> = Vec::new();
    // SAFETY: `each` only reads what the linker passes and pushes onto `out`, which outlives
    // the call.
    unsafe {
        libc::dl_iterate_phdr(Some(each), (&mut out as *mut Vec<Image>).cast());
    }
    out
}

/// The GNU build id in a block of ELF notes (`namesz`, `descsz`, `type`, then the name and the
/// descriptor, each padded to 4 bytes), bounds-checked.
fn gnu_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    let word = |b: &[u8], at: usize| -> Option<usize> {
        let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_ne_bytes(bytes) as usize)
    };
    let pad = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12usize.checked_add(pad(namesz)?)?;
        let desc_end = name_end.checked_add(pad(descsz)?)?;
        let name = notes.get(12..12usize.checked_add(namesz)?)?;
        let desc = notes.get(name_end..name_end.checked_add(descsz)?)?;
        if name == b"GNU\0" && kind == 3 {
            // NT_GNU_BUILD_ID
            return Some(desc.to_vec());
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// The dynamic symbol `dladdr` finds for `addr` (the vDSO, a file that could not be read).
fn dladdr_name(addr: usize) -> Option<String> {
    // SAFETY: `Dl_info` is plain data; zeroed is a valid value for it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only reads its address argument and fills `info`.
    let found = unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_sname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string in the object's string table (loaded while it is).
    let name = unsafe { CStr::from_ptr(info.dli_sname) };
    Some(demangle(name.to_bytes()))
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
    /// A library is read from disk only if the file there is the one loaded: same build id as
    /// the image in memory. One replaced since (another build id) is not read.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_library_replaced_on_disk_is_not_read() {
        let libc = loaded_objects()
            .into_iter()
            .find(|i| {
                i.path
                    .as_deref()
                    .is_some_and(|p| p.to_string_lossy().contains("libc.so"))
            })
            .expect("libc is loaded");
        let path = libc.path.clone().unwrap();
        let id = libc
            .loaded_id
            .clone()
            .expect("libc's loaded image has a build id");
        assert!(
            open(&path, false, Some(&id)).is_some(),
            "the loaded file is read"
        );
        let other: Vec<u8> = id.iter().map(|b| b ^ 0xff).collect();
        assert!(
            open(&path, false, Some(&other)).is_none(),
            "a file whose build id is not the loaded image's is read"
        );
        assert_eq!(gnu_build_id(&[0xff; 11]), None);
        assert_eq!(gnu_build_id(&[0xff; 64]), None);
    }

    use super::*;

    /// A service that pins for weeks at ever new addresses: the resolver keeps at most
    /// `MAX_CACHED` addresses (here 512, the same code: each new address of this unoptimized
    /// test build takes a scan of its symbol table) and `MAX_UNITS` parsed units, and still
    /// resolves.
    #[test]
    fn the_caches_stay_bounded() {
        let max = 512;
        let mut r = Resolver {
            max_cached: max,
            ..Resolver::default()
        };
        let here = the_caches_stay_bounded as fn() as usize;
        let (mut named, mut lines) = (0, 0);
        // Addresses all over this test binary's code, a few units' worth and more.
        let code = loaded_objects()
            .into_iter()
            .find(|i| i.main)
            .and_then(|i| i.segments.into_iter().find(|&(b, e)| b <= here && here < e))
            .expect("the code segment");
        let n = max + max / 2;
        let step = ((code.1 - code.0) / n).max(1);
        for k in 0..n {
            let frames = r.resolve(&[code.0 + k * step]);
            named += usize::from(frames[0].function.is_some());
            lines += usize::from(frames[0].line.is_some());
            assert!(r.cache.len() <= max, "{} cached", r.cache.len());
            let units: usize = r
                .images
                .iter()
                .filter_map(|i| i.file.as_ref()?.as_ref()?.dwarf.as_ref())
                .map(Dwarf::parsed_units)
                .sum();
            assert!(units <= super::super::dwarf::MAX_UNITS, "{units} units");
        }
        assert!(
            named > max && lines > max / 2,
            "{named} named, {lines} with a line"
        );
        // This very function, after all that: the outermost of the address's frames (in a
        // release build its first instructions are code inlined into it), with its path —
        // which, built with line tables only as the workspace is, its DWARF entry lacks.
        let frames = r.resolve(&[here + 1]);
        let outermost = frames.last().expect("a frame");
        assert_eq!(
            outermost.function.as_deref(),
            Some("pinwatch::analyze::symbols::tests::the_caches_stay_bounded"),
            "{frames:?}"
        );
        assert!(outermost
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("symbols.rs")));
    }

    fn named(n: &str) -> Frame {
        Frame::named(n)
    }

    #[test]
    fn a_name_has_a_path_outside_its_generic_arguments() {
        for (name, path) in [
            ("run_task", false),
            ("poll<sample_apps::io::{async_block_env#2}>", false),
            ("{async_fn#0}<alloc::string::String>", false),
            (
                "sample_apps::io::{async_fn#0}::{closure#0}::{async_block#2}",
                true,
            ),
            ("tokio::runtime::task::core::Core<T, S>::poll", true),
            ("<std::fs::File as std::io::Read>::read", true),
            ("<T as core::any::Any>", false),
        ] {
            assert_eq!(has_path(name), path, "{name}");
        }
    }

    /// Only a Rust symbol's name replaces a plain debug-info name: a C function's symbol
    /// carries the compiler's suffixes (helper-68).
    #[test]
    fn only_a_rust_symbol_names_a_function() {
        assert_eq!(
            rust_name(b"_ZN5tokio7runtime8run_task17h0123456789abcdefE").as_deref(),
            Some("tokio::runtime::run_task")
        );
        assert_eq!(rust_name(b"scale.constprop.0"), None);
        assert_eq!(rust_name(b"memcpy"), None);
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
