//! ELF files for the symbolizer: mapped read-only (their pages are the page cache's, not the
//! process's anonymous memory), their sections found by name, their symbol tables searched in
//! place (no index is built: a lookup reads the table once, and the resolver caches answers).

use std::borrow::Cow;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use object::elf::{FileHeader64, SectionHeader64, ELFCOMPRESS_ZLIB, SHF_COMPRESSED, SHT_NOBITS};
use object::read::elf::{CompressionHeader, FileHeader, SectionHeader, SectionTable, Sym};
use object::NativeEndian;

type Header = FileHeader64<NativeEndian>;

/// A file mapped read-only, private; unmapped on drop.
pub(crate) struct Mmap {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; sharing or sending the pointer
// across threads cannot race (nothing writes to it).
unsafe impl Send for Mmap {}

impl Mmap {
    pub(crate) fn open(path: &Path) -> Option<Mmap> {
        let file = File::open(path).ok()?;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of a file we opened; the kernel picks the
        // address. The descriptor may be closed afterwards (the mapping keeps the file).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Lookups read a few scattered pages: no read-ahead (nor, on Linux ≥ 6.4, mapping the
        // pages around each one touched), so the resident pages are the ones read.
        // SAFETY: advice on the mapping just made; it cannot change its contents.
        unsafe {
            libc::madvise(ptr, len, libc::MADV_RANDOM);
        }
        Some(Mmap { ptr, len })
    }

    /// Drops the mapping's pages from this process's page tables (they stay in the page
    /// cache; a later read maps them again). The mapping is private and never written, so its
    /// contents do not change: only the resident set does, back to what it was before the
    /// lookups read it.
    pub(crate) fn release(&self) {
        // SAFETY: advice on this value's own mapping; for a private file mapping that was
        // never written, `MADV_DONTNEED` only unmaps pages that fault back in unchanged.
        unsafe {
            libc::madvise(self.ptr, self.len, libc::MADV_DONTNEED);
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` readable bytes until `drop`. A file changed
        // under the mapping changes what is read, never its validity (a file truncated under
        // it would fault: the same risk every symbolizer that maps files takes).
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; no borrow of it outlives `self`
        // (the borrowers are fields dropped before it, see `dwarf::Image`).
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

/// A parsed 64-bit ELF file, borrowing its bytes.
pub(crate) struct Elf<'a> {
    data: &'a [u8],
    sections: SectionTable<'a, Header>,
}

impl<'a> Elf<'a> {
    pub(crate) fn parse(data: &'a [u8]) -> Option<Elf<'a>> {
        let header = Header::parse(data).ok()?;
        let endian = header.endian().ok()?;
        let sections = header.sections(endian, data).ok()?;
        Some(Elf { data, sections })
    }

    fn section(&self, name: &str) -> Option<&'a SectionHeader64<NativeEndian>> {
        self.sections
            .section_by_name(NativeEndian, name.as_bytes())
            .map(|(_, s)| s)
            .filter(|s| s.sh_type(NativeEndian) != SHT_NOBITS)
    }

    /// Whether the file has DWARF (its `.debug_info` holds data).
    pub(crate) fn has_dwarf(&self) -> bool {
        self.section(".debug_info").is_some()
    }

    /// Whether the file has a `.symtab` (it was not stripped).
    pub(crate) fn has_symtab(&self) -> bool {
        self.sections
            .iter()
            .any(|s| s.sh_type(NativeEndian) == object::elf::SHT_SYMTAB)
    }

    /// Whether the file's `.debug_info` is compressed.
    pub(crate) fn dwarf_compressed(&self) -> bool {
        self.section(".debug_info")
            .is_some_and(|s| s.sh_flags(NativeEndian).contains(SHF_COMPRESSED))
    }

    /// A section's bytes: borrowed from the mapping, or decompressed when the section is
    /// zlib-compressed (`--compress-debug-sections=zlib`; then it costs its size in memory).
    /// Empty when absent or unreadable.
    pub(crate) fn section_data(&self, name: &str) -> Cow<'a, [u8]> {
        let Some(section) = self.section(name) else {
            return Cow::Borrowed(&[]);
        };
        let Ok(data) = section.data(NativeEndian, self.data) else {
            return Cow::Borrowed(&[]);
        };
        if !section.sh_flags(NativeEndian).contains(SHF_COMPRESSED) {
            return Cow::Borrowed(data);
        }
        let mut bytes = object::Bytes(data);
        let decompressed = bytes
            .read::<<Header as FileHeader>::CompressionHeader>()
            .ok()
            .filter(|h| h.ch_type(NativeEndian) == ELFCOMPRESS_ZLIB)
            .and_then(|h| usize::try_from(h.ch_size(NativeEndian)).ok())
            .and_then(|size| inflate(bytes.0, size));
        decompressed.map_or(Cow::Borrowed(&[]), Cow::Owned)
    }

    /// The GNU build id, from the notes.
    pub(crate) fn build_id(&self) -> Option<&'a [u8]> {
        for section in self.sections.iter() {
            if let Ok(Some(mut notes)) = section.notes(NativeEndian, self.data) {
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == object::elf::ELF_NOTE_GNU
                        && note.n_type(NativeEndian) == object::elf::NT_GNU_BUILD_ID
                    {
                        return Some(note.desc());
                    }
                }
            }
        }
        None
    }

    /// The name of the function (or object) symbol that contains `addr` (a file address):
    /// from `.symtab`, or `.dynsym` when the file was stripped. Of several symbols at one
    /// address the first in the table wins. Read in place, once per lookup (no sorted copy
    /// is kept: a big program's table is megabytes, and answers are cached per address).
    pub(crate) fn symbol(&self, addr: u64) -> Option<&'a [u8]> {
        let table = [object::elf::SHT_SYMTAB, object::elf::SHT_DYNSYM]
            .into_iter()
            .filter_map(|kind| self.sections.symbols(NativeEndian, self.data, kind).ok())
            .find(|t| !t.is_empty())?;
        let mut best: Option<(u64, u32)> = None;
        for sym in table.iter() {
            let kind = sym.st_type();
            if (kind != object::elf::STT_FUNC && kind != object::elf::STT_OBJECT)
                || sym.st_shndx(NativeEndian) == object::elf::SHN_UNDEF
            {
                continue;
            }
            let start = sym.st_value(NativeEndian);
            let size = sym.st_size(NativeEndian);
            // Inclusive end, as `backtrace` had it: a return address just past a call at the
            // end of a function still names that function.
            if start <= addr
                && addr <= start.saturating_add(size)
                && best.is_none_or(|(s, _)| start > s)
            {
                best = Some((start, sym.st_name(NativeEndian)));
            }
        }
        let name = table.strings().get(best?.1).ok()?;
        // A `.symtab` names versioned symbols `name@VERSION`; the name is the part before.
        Some(name.split(|&b| b == b'@').next().unwrap_or(name))
    }
}

/// zlib data of a known decompressed size.
fn inflate(input: &[u8], size: usize) -> Option<Vec<u8>> {
    use miniz_oxide::inflate::core::inflate_flags::{
        TINFL_FLAG_PARSE_ZLIB_HEADER, TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
    };
    use miniz_oxide::inflate::core::{decompress, DecompressorOxide};
    use miniz_oxide::inflate::TINFLStatus;
    // Deflate inflates at most about 1032:1 (a 258-byte match coded in two bits), so a claim
    // past that ratio is a corrupt or hostile header (a zip bomb's): it must neither panic
    // (capacity overflow) nor abort (allocation failure) the export thread.
    const MAX_RATIO: usize = 1032;
    if size > input.len().saturating_mul(MAX_RATIO) {
        return None;
    }
    let mut out = Vec::new();
    out.try_reserve_exact(size).ok()?;
    out.resize(size, 0);
    let (status, read, written) = decompress(
        &mut DecompressorOxide::new(),
        input,
        &mut out,
        0,
        TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF | TINFL_FLAG_PARSE_ZLIB_HEADER,
    );
    (status == TINFLStatus::Done && read == input.len() && written == size).then_some(out)
}

/// Where distributions install a file's separate debug info: by build id.
pub(crate) fn debug_file_by_build_id(id: &[u8]) -> Option<std::path::PathBuf> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let hex: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    let path =
        std::path::PathBuf::from(format!("/usr/lib/debug/.build-id/{first:02x}/{hex}.debug"));
    path.exists().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relocatable 64-bit little-endian ELF with a zlib-compressed `.debug_info` whose
    /// compression header claims `claimed` bytes (the stream itself inflates to nothing), and
    /// a `.shstrtab`.
    pub(crate) fn compressed_elf(claimed: u64) -> Vec<u8> {
        let shstrtab = b"\0.debug_info\0.shstrtab\0";
        // zlib of no bytes.
        let zlib = [0x78u8, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
        let mut section = Vec::new();
        section.extend_from_slice(&1u32.to_le_bytes());
        section.extend_from_slice(&0u32.to_le_bytes());
        section.extend_from_slice(&claimed.to_le_bytes());
        section.extend_from_slice(&1u64.to_le_bytes());
        section.extend_from_slice(&zlib);
        let info_at = 64u64;
        let strtab_at = info_at + section.len() as u64;
        let shoff = (strtab_at + shstrtab.len() as u64).next_multiple_of(8);
        let mut f = Vec::new();
        f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&1u16.to_le_bytes()); // ET_REL
        f.extend_from_slice(&62u16.to_le_bytes()); // x86-64
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u64.to_le_bytes()); // entry
        f.extend_from_slice(&0u64.to_le_bytes()); // phoff
        f.extend_from_slice(&shoff.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes()); // flags
        f.extend_from_slice(&64u16.to_le_bytes()); // ehsize
        f.extend_from_slice(&0u16.to_le_bytes()); // phentsize
        f.extend_from_slice(&0u16.to_le_bytes()); // phnum
        f.extend_from_slice(&64u16.to_le_bytes()); // shentsize
        f.extend_from_slice(&3u16.to_le_bytes()); // shnum
        f.extend_from_slice(&2u16.to_le_bytes()); // shstrndx
        assert_eq!(f.len(), 64);
        f.extend_from_slice(&section);
        f.extend_from_slice(shstrtab);
        f.resize(shoff as usize, 0);
        let mut header = |name: u32, kind: u32, flags: u64, offset: u64, size: u64| {
            f.extend_from_slice(&name.to_le_bytes());
            f.extend_from_slice(&kind.to_le_bytes());
            f.extend_from_slice(&flags.to_le_bytes());
            f.extend_from_slice(&0u64.to_le_bytes()); // addr
            f.extend_from_slice(&offset.to_le_bytes());
            f.extend_from_slice(&size.to_le_bytes());
            f.extend_from_slice(&0u32.to_le_bytes()); // link
            f.extend_from_slice(&0u32.to_le_bytes()); // info
            f.extend_from_slice(&1u64.to_le_bytes()); // addralign
            f.extend_from_slice(&0u64.to_le_bytes()); // entsize
        };
        header(0, 0, 0, 0, 0);
        header(1, 1, 0x800, info_at, section.len() as u64);
        header(13, 3, 0, strtab_at, shstrtab.len() as u64);
        f
    }

    /// A compressed section that claims more than zlib can inflate its bytes to (a zip bomb's
    /// header, or a corrupt one) is read as absent: no allocation of the claimed size, no
    /// panic ("capacity overflow"), no abort (allocation failure) on the export thread.
    #[test]
    fn a_compressed_section_claiming_a_huge_size_is_absent() {
        for claimed in [u64::MAX, 1 << 62, 1 << 46, 1 << 40, 1 << 33] {
            let file = compressed_elf(claimed);
            let elf = Elf::parse(&file).expect("the crafted ELF parses");
            assert!(elf.dwarf_compressed());
            assert!(
                elf.section_data(".debug_info").is_empty(),
                "claimed {claimed}"
            );
        }
        // The honest claim still inflates (to nothing here).
        let file = compressed_elf(0);
        assert!(Elf::parse(&file)
            .unwrap()
            .section_data(".debug_info")
            .is_empty());
    }
}
