//! DWARF read lazily, one compilation unit and one function at a time.
//!
//! `backtrace::resolve` (addr2line's `Context`) parsed every unit's header, abbreviations and
//! line-program header up front, then for each unit it touched the whole line table (one row
//! per instruction boundary: std's unit alone is megabytes) and every function; and it
//! decompressed a shared library's separate debug file (libc's: 30 MiB). Here the start is an
//! address → unit index (`.debug_aranges`, or a unit's root entry when aranges miss it); a
//! lookup parses its unit's header and abbreviations, the unit's list of line sequences (start,
//! end, where its rows are) and function ranges, then runs only the one sequence and walks only
//! the one function's inlined calls the address is in. A few parsed units are kept (bounded).
//! Units `.debug_aranges` does not list are read only when an address is in no listed unit.

use std::borrow::Cow;
use std::cell::OnceCell;

use gimli::{AttributeValue, DebugInfoOffset, UnitOffset};

type R = gimli::EndianSlice<'static, gimli::NativeEndian>;

/// How many parsed units are kept (each holds its abbreviations, its line sequences and its
/// function ranges: a few KiB, up to about 100 KiB for std's unit). One stack passes through
/// a dozen or two.
pub(crate) const MAX_UNITS: usize = 32;

/// One frame as DWARF says it: a raw (mangled or plain) name, file and line.
pub(crate) struct RawFrame {
    pub name: Option<R>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The function the probe is in, not one inlined into it, and its entry has no linkage
    /// name: `name` is at best its plain name (`run_task`, `poll<…>`, with line tables only),
    /// and the symbol table's, which is the same function's, says more.
    pub plain_outer: bool,
}

/// The DWARF of one file.
pub(crate) struct Dwarf {
    dwarf: gimli::Dwarf<R>,
    /// Address ranges → unit (its `.debug_info` offset), sorted by start.
    ranges: Vec<(u64, u64, usize)>,
    /// The units `.debug_aranges` lists, sorted.
    covered: Vec<usize>,
    /// Every unit's offset, sorted (to find the unit a cross-unit reference points into), and
    /// those `.debug_aranges` does not list. Read on first need: listing them touches every
    /// unit's header, all over `.debug_info`.
    units: OnceCell<Units>,
    uncovered_indexed: bool,
    parsed: Vec<Parsed>,
    clock: u64,
    /// Decompressed sections the readers borrow (their heap buffers never move). Declared
    /// last: dropped after `dwarf` and `parsed`.
    _owned: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Units {
    all: Vec<usize>,
    /// Units `.debug_aranges` does not list (rustc's have no code of their own): their ranges
    /// are read from their root entries only when an address is in no listed unit.
    uncovered: Vec<usize>,
}

fn list_units(dwarf: &gimli::Dwarf<R>, covered: &[usize]) -> Units {
    let mut units = Units::default();
    let mut iter = dwarf.units();
    while let Ok(Some(header)) = iter.next() {
        let Some(DebugInfoOffset(offset)) = header.debug_info_offset() else {
            continue;
        };
        match header.type_() {
            gimli::UnitType::Type { .. } | gimli::UnitType::SplitType { .. } => continue,
            gimli::UnitType::Partial => {}
            _ if covered.binary_search(&offset).is_err() => units.uncovered.push(offset),
            _ => {}
        }
        units.all.push(offset);
    }
    units.all.sort_unstable();
    units
}

struct Parsed {
    offset: usize,
    unit: gimli::Unit<R>,
    /// The line program's header and its sequences, sorted by start.
    lines: Option<(gimli::CompleteLineProgram<R>, Vec<gimli::LineSequence<R>>)>,
    /// Subprogram ranges and their entries, sorted by start.
    functions: Vec<(u64, u64, UnitOffset)>,
    used: u64,
}

impl Dwarf {
    /// Reads the unit index of `elf`'s DWARF.
    ///
    /// # Safety
    ///
    /// The bytes `elf` borrows must outlive the returned value (the caller keeps their mapping
    /// and drops it after this).
    pub(crate) unsafe fn load(elf: &super::elf::Elf<'_>) -> Option<Dwarf> {
        let mut owned = Vec::new();
        let dwarf = gimli::Dwarf::load(|id| -> Result<R, ()> {
            let data: &'static [u8] = match elf.section_data(id.name()) {
                // SAFETY: the caller keeps the mapping alive as long as the returned value.
                Cow::Borrowed(b) => unsafe { std::mem::transmute::<&[u8], &'static [u8]>(b) },
                Cow::Owned(v) => {
                    // SAFETY: the buffer is kept in `_owned` (moving a `Vec` does not move
                    // its heap buffer), dropped after every reader that borrows it.
                    let b = unsafe { std::slice::from_raw_parts(v.as_ptr(), v.len()) };
                    owned.push(v);
                    b
                }
            };
            Ok(gimli::EndianSlice::new(data, gimli::NativeEndian))
        })
        .ok()?;
        let mut ranges = Vec::new();
        let mut covered = Vec::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Ok(Some(header)) = headers.next() {
            let unit = header.debug_info_offset().0;
            let mut entries = header.entries();
            // Errors (an address overflow rustc once emitted) end that set only.
            while let Ok(Some(e)) = entries.next() {
                if e.length() > 0 {
                    ranges.push((e.range().begin, e.range().end, unit));
                }
            }
            covered.push(unit);
        }
        covered.sort_unstable();
        ranges.sort_unstable_by_key(|r| r.0);
        ranges.shrink_to_fit();
        Some(Dwarf {
            dwarf,
            ranges,
            covered,
            units: OnceCell::new(),
            uncovered_indexed: false,
            parsed: Vec::new(),
            clock: 0,
            _owned: owned,
        })
    }

    /// The frames at `probe` (a file address), innermost first; empty when no unit has it.
    pub(crate) fn frames(&mut self, probe: u64) -> Vec<RawFrame> {
        let frames = self.frames_in_listed(probe);
        if !frames.is_empty() || self.uncovered_indexed {
            return frames;
        }
        self.index_uncovered();
        self.frames_in_listed(probe)
    }

    fn frames_in_listed(&mut self, probe: u64) -> Vec<RawFrame> {
        // Units whose ranges hold the probe (usually one; overlapping ranges are rare).
        let end = self.ranges.partition_point(|r| r.0 <= probe);
        let candidates: Vec<usize> = self.ranges[..end]
            .iter()
            .rev()
            .take(16)
            .filter(|r| probe < r.1)
            .map(|r| r.2)
            .collect();
        for offset in candidates {
            let Some(i) = self.unit(offset) else {
                continue;
            };
            let units = Lazy {
                dwarf: &self.dwarf,
                covered: &self.covered,
                units: &self.units,
            };
            let frames = unit_frames(&units, &self.parsed[i], probe);
            if !frames.is_empty() {
                return frames;
            }
        }
        Vec::new()
    }

    /// Adds the ranges of the units `.debug_aranges` missed (once).
    fn index_uncovered(&mut self) {
        self.uncovered_indexed = true;
        let units = self
            .units
            .get_or_init(|| list_units(&self.dwarf, &self.covered));
        for &offset in &units.uncovered {
            let Ok(header) = self
                .dwarf
                .debug_info
                .header_from_offset(DebugInfoOffset(offset))
            else {
                continue;
            };
            let Ok(unit) = self.dwarf.unit(header) else {
                continue;
            };
            if let Ok(mut it) = self.dwarf.unit_ranges(&unit) {
                while let Ok(Some(r)) = it.next() {
                    if r.begin < r.end {
                        self.ranges.push((r.begin, r.end, offset));
                    }
                }
            }
        }
        self.ranges.sort_unstable_by_key(|r| r.0);
        self.ranges.shrink_to_fit();
    }

    /// How many units are held parsed.
    #[cfg(test)]
    pub(crate) fn parsed_units(&self) -> usize {
        self.parsed.len()
    }

    /// The parsed unit at `offset` (parsing it, and evicting the least recently used one
    /// when `MAX_UNITS` are kept).
    fn unit(&mut self, offset: usize) -> Option<usize> {
        self.clock += 1;
        if let Some(i) = self.parsed.iter().position(|p| p.offset == offset) {
            self.parsed[i].used = self.clock;
            return Some(i);
        }
        let header = self
            .dwarf
            .debug_info
            .header_from_offset(DebugInfoOffset(offset))
            .ok()?;
        let unit = self.dwarf.unit(header).ok()?;
        let unit_ref = gimli::UnitRef::new(&self.dwarf, &unit);
        let functions = function_ranges(unit_ref);
        let lines = unit
            .line_program
            .clone()
            .and_then(|p| p.sequences().ok())
            .map(|(program, mut seqs)| {
                seqs.sort_unstable_by_key(|s| s.start);
                seqs.shrink_to_fit();
                (program, seqs)
            });
        let parsed = Parsed {
            offset,
            unit,
            lines,
            functions,
            used: self.clock,
        };
        if self.parsed.len() < MAX_UNITS {
            self.parsed.push(parsed);
            return Some(self.parsed.len() - 1);
        }
        let (oldest, _) = self.parsed.iter().enumerate().min_by_key(|(_, p)| p.used)?;
        self.parsed[oldest] = parsed;
        Some(oldest)
    }
}

/// The attributes of an entry the lookups use.
#[derive(Default)]
struct Attrs {
    low: Option<u64>,
    high: Option<u64>,
    size: Option<u64>,
    ranges: Option<gimli::RangeListsOffset>,
    name: Option<AttributeValue<R>>,
    linkage: Option<AttributeValue<R>>,
    origin: Option<AttributeValue<R>>,
    call_file: Option<u64>,
    call_line: u32,
}

fn read_attrs(
    entries: &mut gimli::EntriesRaw<'_, R>,
    abbrev: &gimli::Abbreviation,
    unit: gimli::UnitRef<'_, R>,
) -> Option<Attrs> {
    let mut a = Attrs::default();
    for spec in abbrev.attributes() {
        let attr = entries.read_attribute(*spec).ok()?;
        match attr.name() {
            gimli::DW_AT_low_pc => match attr.value() {
                AttributeValue::Addr(v) => a.low = Some(v),
                AttributeValue::DebugAddrIndex(i) => a.low = unit.address(i).ok(),
                _ => {}
            },
            gimli::DW_AT_high_pc => match attr.value() {
                AttributeValue::Addr(v) => a.high = Some(v),
                AttributeValue::DebugAddrIndex(i) => a.high = unit.address(i).ok(),
                AttributeValue::Udata(v) => a.size = Some(v),
                _ => {}
            },
            gimli::DW_AT_ranges => a.ranges = unit.attr_ranges_offset(attr.value()).ok()?,
            gimli::DW_AT_name => a.name = Some(attr.value()),
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                a.linkage = Some(attr.value())
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                a.origin = Some(attr.value())
            }
            gimli::DW_AT_call_file => {
                // DWARF 5 numbers files from 0; before it, 0 meant none.
                if let AttributeValue::FileIndex(f) = attr.value() {
                    if f > 0 || unit.header.version() >= 5 {
                        a.call_file = Some(f);
                    }
                }
            }
            gimli::DW_AT_call_line => {
                a.call_line = attr
                    .udata_value()
                    .and_then(|l| u32::try_from(l).ok())
                    .unwrap_or(0)
            }
            _ => {}
        }
    }
    Some(a)
}

/// Calls `f` with each address range of the entry.
fn for_each_range(a: &Attrs, unit: gimli::UnitRef<'_, R>, mut f: impl FnMut(u64, u64)) {
    if let Some(offset) = a.ranges {
        if let Ok(mut it) = unit.ranges(offset) {
            while let Ok(Some(r)) = it.next() {
                if r.begin < r.end {
                    f(r.begin, r.end);
                }
            }
        }
    } else if let Some(low) = a.low {
        let end = a.high.or_else(|| a.size.map(|s| low.saturating_add(s)));
        if let Some(end) = end.filter(|&e| low < e) {
            f(low, end);
        }
    }
}

fn contains(a: &Attrs, unit: gimli::UnitRef<'_, R>, probe: u64) -> bool {
    let mut hit = false;
    for_each_range(a, unit, |b, e| hit |= b <= probe && probe < e);
    hit
}

/// Every subprogram's ranges in the unit, sorted by start.
fn function_ranges(unit: gimli::UnitRef<'_, R>) -> Vec<(u64, u64, UnitOffset)> {
    let mut out = Vec::new();
    let Ok(mut entries) = unit.entries_raw(None) else {
        return out;
    };
    while !entries.is_empty() {
        let offset = entries.next_offset();
        let abbrev = match entries.read_abbreviation() {
            Ok(Some(a)) => a,
            Ok(None) => continue,
            Err(_) => break,
        };
        if abbrev.tag() == gimli::DW_TAG_subprogram {
            let Some(a) = read_attrs(&mut entries, abbrev, unit) else {
                break;
            };
            for_each_range(&a, unit, |b, e| out.push((b, e, offset)));
        } else if entries.skip_attributes(abbrev.attributes()).is_err() {
            break;
        }
    }
    out.sort_unstable_by_key(|f| f.0);
    out.shrink_to_fit();
    out
}

/// Skips the children of the entry just read at `depth`.
fn skip_children(entries: &mut gimli::EntriesRaw<'_, R>, depth: isize) -> Option<()> {
    while !entries.is_empty() && entries.next_depth() > depth {
        if let Some(a) = entries.read_abbreviation().ok()? {
            entries.skip_attributes(a.attributes()).ok()?;
        }
    }
    Some(())
}

/// The file's DWARF and its unit list, listed on first need.
struct Lazy<'a> {
    dwarf: &'a gimli::Dwarf<R>,
    covered: &'a [usize],
    units: &'a OnceCell<Units>,
}

impl Lazy<'_> {
    fn all(&self) -> &[usize] {
        &self
            .units
            .get_or_init(|| list_units(self.dwarf, self.covered))
            .all
    }
}

fn unit_frames(units: &Lazy<'_>, parsed: &Parsed, probe: u64) -> Vec<RawFrame> {
    let dwarf = units.dwarf;
    let unit = gimli::UnitRef::new(dwarf, &parsed.unit);
    let location = location(parsed, unit, probe);
    let end = parsed.functions.partition_point(|f| f.0 <= probe);
    let function = parsed.functions[..end]
        .iter()
        .rev()
        .take(8)
        .find(|f| probe < f.1)
        .map(|f| f.2);
    let Some(function) = function else {
        return match location {
            Some((file, line)) => vec![RawFrame {
                name: None,
                file,
                line,
                plain_outer: true,
            }],
            None => Vec::new(),
        };
    };
    // The function's entry, then the inlined calls that hold the probe, outermost first.
    let mut chain: Vec<Attrs> = Vec::new();
    let Some(outer) = (|| {
        let mut entries = unit.entries_raw(Some(function)).ok()?;
        let depth = entries.next_depth();
        let abbrev = entries.read_abbreviation().ok()??;
        let outer = read_attrs(&mut entries, abbrev, unit)?;
        while !entries.is_empty() {
            let d = entries.next_depth();
            if d <= depth {
                break;
            }
            let Ok(read) = entries.read_abbreviation() else {
                break;
            };
            let Some(abbrev) = read else {
                continue;
            };
            match abbrev.tag() {
                gimli::DW_TAG_inlined_subroutine => {
                    let Some(a) = read_attrs(&mut entries, abbrev, unit) else {
                        break;
                    };
                    if contains(&a, unit, probe) {
                        chain.push(a);
                    } else if abbrev.has_children() && skip_children(&mut entries, d).is_none() {
                        break;
                    }
                }
                gimli::DW_TAG_subprogram => {
                    if entries.skip_attributes(abbrev.attributes()).is_err()
                        || (abbrev.has_children() && skip_children(&mut entries, d).is_none())
                    {
                        break;
                    }
                }
                _ => {
                    if entries.skip_attributes(abbrev.attributes()).is_err() {
                        break;
                    }
                }
            }
        }
        Some(outer)
    })() else {
        return Vec::new();
    };
    let mut frames = Vec::with_capacity(chain.len() + 1);
    let (mut file, mut line) = location.unwrap_or((None, None));
    for inlined in chain.iter().rev() {
        frames.push(RawFrame {
            name: name(units, unit, inlined, 16),
            file,
            line,
            plain_outer: false,
        });
        file = inlined.call_file.and_then(|f| file_name(parsed, unit, f));
        line = (inlined.call_line != 0).then_some(inlined.call_line);
    }
    frames.push(RawFrame {
        name: name(units, unit, &outer, 16),
        file,
        line,
        plain_outer: outer.linkage.is_none(),
    });
    frames
}

/// The file and line of the row that holds `probe` (line `None` for DWARF's line 0).
fn location(
    parsed: &Parsed,
    unit: gimli::UnitRef<'_, R>,
    probe: u64,
) -> Option<(Option<String>, Option<u32>)> {
    let (program, seqs) = parsed.lines.as_ref()?;
    let i = seqs.partition_point(|s| s.start <= probe).checked_sub(1)?;
    let seq = seqs.get(i).filter(|s| probe < s.end)?;
    let mut rows = program.resume_from(seq);
    let mut best: Option<(u64, u32)> = None;
    while let Ok(Some((_, row))) = rows.next_row() {
        if row.address() > probe {
            break;
        }
        if row.end_sequence() {
            continue;
        }
        let line = row
            .line()
            .map_or(0, |l| u32::try_from(l.get()).unwrap_or(0));
        best = Some((row.file_index(), line));
    }
    let (file, line) = best?;
    Some((file_name(parsed, unit, file), (line != 0).then_some(line)))
}

/// A file of the unit's line table as a path: the unit's directory, the file's directory,
/// the file's name (each absolute one replacing what came before).
fn file_name(parsed: &Parsed, unit: gimli::UnitRef<'_, R>, index: u64) -> Option<String> {
    let (program, _) = parsed.lines.as_ref()?;
    let header = program.header();
    let file = header.file(index)?;
    let mut path = unit
        .comp_dir
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            push_path(&mut path, &unit.attr_string(dir).ok()?.to_string_lossy());
        }
    }
    push_path(
        &mut path,
        &unit.attr_string(file.path_name()).ok()?.to_string_lossy(),
    );
    Some(path)
}

fn push_path(path: &mut String, p: &str) {
    if p.starts_with('/') {
        *path = p.to_owned();
    } else {
        if !path.is_empty() && !path.ends_with('/') {
            path.push('/');
        }
        path.push_str(p);
    }
}

/// An entry's name: its linkage name, else its name, else its origin's (abstract origin or
/// specification, followed up to `limit` times, into other units too).
fn name(units: &Lazy<'_>, unit: gimli::UnitRef<'_, R>, a: &Attrs, limit: usize) -> Option<R> {
    if let Some(n) = a.linkage.and_then(|v| unit.attr_string(v).ok()) {
        return Some(n);
    }
    if let Some(n) = a.name.and_then(|v| unit.attr_string(v).ok()) {
        return Some(n);
    }
    let limit = limit.checked_sub(1)?;
    match a.origin? {
        AttributeValue::UnitRef(offset) => entry_name(units, unit, offset, limit),
        AttributeValue::DebugInfoRef(target) => {
            if let Some(offset) = target.to_unit_offset(&unit.header) {
                return entry_name(units, unit, offset, limit);
            }
            // Another unit: parse it for this one name (rare: cross-unit references).
            let dwarf = units.dwarf;
            let all = units.all();
            let start = *all.get(all.partition_point(|&u| u <= target.0).checked_sub(1)?)?;
            let header = dwarf
                .debug_info
                .header_from_offset(DebugInfoOffset(start))
                .ok()?;
            let other = dwarf.unit(header).ok()?;
            let other_ref = gimli::UnitRef::new(dwarf, &other);
            let offset = target.to_unit_offset(&other.header)?;
            entry_name(units, other_ref, offset, limit)
        }
        _ => None,
    }
}

fn entry_name(
    units: &Lazy<'_>,
    unit: gimli::UnitRef<'_, R>,
    offset: UnitOffset,
    limit: usize,
) -> Option<R> {
    let mut entries = unit.entries_raw(Some(offset)).ok()?;
    let abbrev = entries.read_abbreviation().ok()??;
    let a = read_attrs(&mut entries, abbrev, unit)?;
    name(units, unit, &a, limit)
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::analyze::elf::Elf;

    /// xorshift64: the same mutations on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Loads `bytes` as an ELF with DWARF and looks up a spread of addresses: must return
    /// (anything) without panicking.
    fn exercise(bytes: &[u8], probes: &[u64]) {
        let Some(elf) = Elf::parse(bytes) else { return };
        let _ = elf.build_id();
        let _ = elf.has_symtab();
        for &p in probes.iter().take(4) {
            let _ = elf.symbol(p);
        }
        // SAFETY: `bytes` outlives `dwarf`, dropped at the end of this block.
        if let Some(mut dwarf) = unsafe { Dwarf::load(&elf) } {
            for &p in probes {
                let _ = dwarf.frames(p);
            }
        }
    }

    /// A hostile or corrupt file (a `.so` rewritten on disk, a crafted ELF) never panics the
    /// symbolizer: this test binary's own ELF and DWARF, with section headers pointed past the
    /// end and random bytes flipped in the DWARF sections, parsed and looked up.
    #[test]
    fn corrupt_elf_and_dwarf_never_panic() {
        let exe = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        let elf = Elf::parse(&exe).expect("this test binary parses");
        assert!(elf.has_dwarf(), "the test binary has DWARF");
        // Addresses that the DWARF covers: the arange starts.
        // SAFETY: `exe` outlives `dwarf`.
        let dwarf = unsafe { Dwarf::load(&elf) }.expect("DWARF loads");
        let mut probes: Vec<u64> = dwarf.ranges.iter().step_by(97).map(|r| r.0 + 1).collect();
        probes.truncate(40);
        drop(dwarf);
        // Section header table: each header's offset and size set past the end.
        let shoff = u64::from_le_bytes(exe[0x28..0x30].try_into().unwrap()) as usize;
        let shnum = u16::from_le_bytes(exe[0x3c..0x3e].try_into().unwrap()) as usize;
        let mut copy = exe.clone();
        for i in 1..shnum {
            let at = shoff + i * 64;
            for (field, value) in [
                (24, u64::MAX - 7),
                (32, u64::MAX / 2),
                (32, exe.len() as u64),
            ] {
                let saved = copy[at + field..at + field + 8].to_vec();
                copy[at + field..at + field + 8].copy_from_slice(&value.to_le_bytes());
                exercise(&copy, &probes[..probes.len().min(3)]);
                copy[at + field..at + field + 8].copy_from_slice(&saved);
            }
        }
        // Random bytes flipped in the sections the lookups read.
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let sections: Vec<(usize, usize)> = [
            ".debug_info",
            ".debug_abbrev",
            ".debug_line",
            ".debug_aranges",
            ".debug_str",
            ".debug_rnglists",
        ]
        .iter()
        .filter_map(|name| {
            let data = elf.section_data(name);
            // Borrowed from `exe` (not compressed), or skipped.
            let start = (data.as_ptr() as usize).checked_sub(exe.as_ptr() as usize)?;
            (!data.is_empty() && start + data.len() <= exe.len()).then_some((start, data.len()))
        })
        .collect();
        assert!(!sections.is_empty());
        for round in 0..36 {
            let mut copy = exe.clone();
            let (start, len) = sections[round % sections.len()];
            // Mostly near the start (the headers and first units), some anywhere.
            for _ in 0..16 {
                let span = if rng.next().is_multiple_of(4) {
                    len
                } else {
                    len.min(4096)
                };
                let at = start + (rng.next() as usize) % span;
                copy[at] ^= (rng.next() as u8) | 1;
            }
            exercise(&copy, &probes);
        }
    }
}
