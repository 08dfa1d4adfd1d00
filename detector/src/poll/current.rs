//! The calling thread's claim, as the poll hooks read it: one thread-local [`Current`] (which
//! table, which slot, which poll cell).
//!
//! On x86-64 Linux it is a thread-local of pinwatch's own in the *initial-exec* model, read with
//! inline assembly: an offset that the linker makes a constant, then a `%fs`-relative load per
//! field, and nothing else. A Rust `thread_local!` in a library is compiled in the
//! general-dynamic model: the linker also turns its access into two instructions in an
//! executable, but the compiler has planned for a call to `__tls_get_addr` and saves every
//! live register around it: with a `thread_local!` the two hooks run 34 instructions per poll,
//! with this 24 (cachegrind, `examples/yield_storm.rs`). Elsewhere a `thread_local!` holds it.
//!
//! Initial-exec is what a shared object loaded at startup (or a `dlopen`ed one, within glibc's
//! reserve of static TLS, a few KiB; these are 24 bytes) may use; the symbol carries the
//! crate's semver-compatible version, so two incompatible pinwatch versions in one process
//! keep their own.

use std::ptr;

use super::protocol::PollCell;
use super::slot::Slot;

/// What the calling thread has claimed.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Current {
    /// The address of the table holding the claimed slot (its key, `SlotTable::key`); 0 when
    /// none.
    pub owner: usize,
    /// The claimed slot's poll cell, or [`NO_CELL`]: never null, so that the after-poll hook
    /// needs no test before it ends the poll.
    pub cell: *const PollCell,
    /// The claimed slot, or null.
    pub slot: *const Slot,
}

/// The poll cell of a thread with no slot. Its counter stays 0: the after-poll hook of such a
/// thread stores 0 over 0 (an end without a running poll leaves an even counter as it is), and
/// its flag is never set, so that hook never takes its rare path here. No watchdog reads it.
pub(crate) static NO_CELL: PollCell = PollCell::new();

/// A thread with no claim.
pub(crate) const NO_CLAIM: Current = Current {
    owner: 0,
    cell: &NO_CELL,
    slot: ptr::null(),
};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::arch::{asm, global_asm};

    use super::{Current, PollCell, Slot, NO_CELL};

    /// The symbol of the thread-local: `pinwatch_poll_current_<major>_<minor>`.
    macro_rules! symbol {
        () => {
            concat!(
                "pinwatch_poll_current_",
                env!("CARGO_PKG_VERSION_MAJOR"),
                "_",
                env!("CARGO_PKG_VERSION_MINOR")
            )
        };
    }

    // The thread-local itself: a `Current` in `.tdata`, initialised to `NO_CLAIM` (0, the
    // address of `NO_CELL`, null). Global so that every codegen unit (and crate inlining the
    // hooks) links to the one definition; hidden, so a shared object does not export it.
    global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 3",
        concat!(".globl ", symbol!()),
        concat!(".hidden ", symbol!()),
        concat!(".type ", symbol!(), ",@object"),
        concat!(".size ", symbol!(), ",24"),
        concat!(symbol!(), ":"),
        ".quad 0",
        ".quad {no_cell}",
        ".quad 0",
        ".popsection",
        no_cell = sym NO_CELL,
    );

    /// The thread-local's offset from the thread pointer (`%fs` base): the same for every
    /// thread; a constant once linked into an executable.
    #[inline(always)]
    fn offset() -> usize {
        let offset: usize;
        // SAFETY: loads the GOT entry the linker fills with the symbol's TLS offset; touches no
        // other memory.
        unsafe {
            asm!(
                concat!("mov {}, qword ptr [rip + ", symbol!(), "@GOTTPOFF]"),
                out(reg) offset,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        offset
    }

    /// The claim's table key and poll cell.
    #[inline(always)]
    pub(crate) fn owner_and_cell() -> (usize, *const PollCell) {
        let (owner, cell): (usize, *const PollCell);
        // SAFETY: two loads from the calling thread's own `Current`, which lives as long as the
        // thread; only this thread (and its signal handlers, which only read) accesses it.
        unsafe {
            asm!(
                "mov {owner}, qword ptr fs:[{off}]",
                "mov {cell}, qword ptr fs:[{off} + 8]",
                off = in(reg) offset(),
                // Written before `off` is read for the last time: not `lateout`.
                owner = out(reg) owner,
                cell = lateout(reg) cell,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        (owner, cell)
    }

    /// The claim's poll cell.
    #[inline(always)]
    pub(crate) fn cell() -> *const PollCell {
        let cell: *const PollCell;
        // SAFETY: as in `owner_and_cell`: one load from the thread's own `Current`.
        unsafe {
            asm!(
                "mov {cell}, qword ptr fs:[{off} + 8]",
                off = in(reg) offset(),
                cell = lateout(reg) cell,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        cell
    }

    /// The claimed slot, or null.
    #[inline(always)]
    pub(crate) fn slot() -> *const Slot {
        let slot: *const Slot;
        // SAFETY: as in `owner_and_cell`: one load from the thread's own `Current`.
        unsafe {
            asm!(
                "mov {slot}, qword ptr fs:[{off} + 16]",
                off = in(reg) offset(),
                slot = lateout(reg) slot,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        slot
    }

    /// The whole claim. Async-signal-safe.
    #[inline]
    pub(crate) fn get() -> Current {
        let (owner, cell, slot): (usize, usize, usize);
        // SAFETY: as in `owner_and_cell`: three loads from the thread's own `Current`.
        unsafe {
            asm!(
                "mov {owner}, qword ptr fs:[{off}]",
                "mov {cell}, qword ptr fs:[{off} + 8]",
                "mov {slot}, qword ptr fs:[{off} + 16]",
                off = in(reg) offset(),
                // Written before `off` is read for the last time: not `lateout`.
                owner = out(reg) owner,
                cell = out(reg) cell,
                slot = lateout(reg) slot,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        Current {
            owner,
            cell: cell as *const PollCell,
            slot: slot as *const _,
        }
    }

    /// Replaces the claim. Each field is one store, so a signal handler reading `slot` in
    /// between sees the old slot or the new one.
    pub(crate) fn set(c: Current) {
        // SAFETY: three stores to the thread's own `Current`; the pointers stored stay valid as
        // long as `Current` says (the caller's claim keeps them alive, or they are `NO_CLAIM`'s).
        unsafe {
            asm!(
                "mov qword ptr fs:[{off}], {owner}",
                "mov qword ptr fs:[{off} + 8], {cell}",
                "mov qword ptr fs:[{off} + 16], {slot}",
                off = in(reg) offset(),
                owner = in(reg) c.owner,
                cell = in(reg) c.cell,
                slot = in(reg) c.slot,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::cell::Cell;

    use super::{Current, PollCell, Slot, NO_CLAIM};

    thread_local! {
        /// Const-initialised and without a destructor, so reading it is a plain thread-local
        /// load (and is async-signal-safe).
        static CURRENT: Cell<Current> = const { Cell::new(NO_CLAIM) };
    }

    #[inline(always)]
    pub(crate) fn owner_and_cell() -> (usize, *const PollCell) {
        let c = CURRENT.get();
        (c.owner, c.cell)
    }

    #[inline(always)]
    pub(crate) fn cell() -> *const PollCell {
        CURRENT.get().cell
    }

    /// As `get`, async-signal-safe: the signal handler reads it.
    #[inline]
    pub(crate) fn slot() -> *const Slot {
        CURRENT
            .try_with(|c| c.get().slot)
            .unwrap_or(std::ptr::null())
    }

    #[inline]
    pub(crate) fn get() -> Current {
        CURRENT.try_with(Cell::get).unwrap_or(NO_CLAIM)
    }

    pub(crate) fn set(c: Current) {
        let _ = CURRENT.try_with(|cur| cur.set(c));
    }
}

pub(crate) use imp::{cell, get, owner_and_cell, set, slot};
