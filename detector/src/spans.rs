//! `tracing` spans on pinned events: [`tracing_layer()`], the layer a service adds to its
//! subscriber so that each pin says which request (which span, which trace) it happened in.
//!
//! Two sides, as in console-subscriber:
//! - `poll/span_stack.rs`: what `on_enter`/`on_exit` do (they run inside polls): push or pop the
//!   span's id on a fixed stack in the calling thread's slot. No allocation, lock or system
//!   call; a thread with no slot (not a watched worker) does nothing.
//! - here: `on_new_span`/`on_record`/`on_close` (once per span, not per poll) keep each open
//!   span's metadata, parent and fields (bounded, formatted into one buffer) in a table of
//!   pinwatch's own, split in `SHARDS` (64) parts by span id, where the watchdog looks up the
//!   innermost span entered during the poll it flags, and that span's parents. The watchdog
//!   never reads the subscriber's registry: another layer may hold a span's lock there while
//!   it runs the service's code (a field's `Debug`), and dropping a registry reference on the
//!   watchdog's thread could close a span against the wrong subscriber. A part's lock is held
//!   only by pinwatch's own code, for an insert, a lookup, a merge, a removal or a copy — never
//!   while a value is formatted.
//!
//! Which spans a pin shows: the innermost span *entered during the pinned poll* on the pinned
//! thread, and its parents (the span tree, outermost first). A span entered before the poll began
//! (a `block_on` caller's `span.enter()`, a span left entered by an earlier poll) is not one of
//! the poll's own: a pin whose poll entered no span has none, even if such a span is entered —
//! though it shows as a parent of a span created inside it. A span entered on another thread
//! never shows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::event::SpanInfo;
use crate::poll::claim::current_slot_any;
use crate::poll::slot::Slot;

/// Spans a pinned event carries at most: the innermost ones.
pub const MAX_SPANS: usize = 8;
/// Fields kept per span at most (the first ones recorded).
pub const MAX_FIELDS: usize = 16;
/// Bytes of a field's value kept at most (cut at a character boundary, with `…`).
pub const MAX_VALUE_BYTES: usize = 128;

/// Bytes of field text a span keeps in place; more goes to the heap.
const INLINE_TEXT: usize = 160;

/// What pinwatch keeps of an open span: its metadata, its parent as this layer saw it, and its
/// fields.
struct Kept {
    meta: &'static tracing::Metadata<'static>,
    parent: Option<u64>,
    fields: Fields,
    #[cfg(feature = "otel-trace")]
    trace_id: Option<String>,
    #[cfg(feature = "otel-trace")]
    span_id: Option<String>,
}

/// Records of closed spans a thread keeps for the spans it creates next, at most: creating a
/// span then allocates nothing (nor copies a new record into place). Spans close on the thread
/// their task runs on, not always the one that made them: a thread with none spare allocates,
/// one with this many frees.
const SPARES: usize = 32;

/// A thread's spare records: the first `n` places hold one each. Cells, not a `RefCell<Vec>`:
/// taking or putting back one is a few loads and stores, no borrow flag or capacity to check.
struct Spares {
    n: std::cell::Cell<usize>,
    // Boxed: a record moves between here and the table by pointer, never by copy.
    kept: [std::cell::Cell<Option<Box<Kept>>>; SPARES],
}

thread_local! {
    static SPARE: Spares = const {
        Spares {
            n: std::cell::Cell::new(0),
            kept: [const { std::cell::Cell::new(None) }; SPARES],
        }
    };
}

/// A record for a new span of `meta` under `parent`, with no fields yet: one of the thread's
/// spares, or a new one.
#[inline]
fn spare(meta: &'static tracing::Metadata<'static>, parent: Option<u64>) -> Box<Kept> {
    let spare = SPARE
        .try_with(|s| {
            let n = s.n.get().checked_sub(1)?;
            let kept = s.kept.get(n)?.take();
            s.n.set(n);
            kept
        })
        .ok()
        .flatten();
    match spare {
        Some(mut kept) => {
            // Put away empty (`put_away`): only what says which span it is.
            kept.meta = meta;
            kept.parent = parent;
            kept
        }
        None => new_record(meta, parent),
    }
}

/// A new record, for a thread with no spare.
#[cold]
#[inline(never)]
fn new_record(meta: &'static tracing::Metadata<'static>, parent: Option<u64>) -> Box<Kept> {
    Box::new(Kept {
        meta,
        parent,
        fields: Fields::default(),
        #[cfg(feature = "otel-trace")]
        trace_id: None,
        #[cfg(feature = "otel-trace")]
        span_id: None,
    })
}

/// The record of a closed span: emptied (a long text's heap freed now), and kept for the
/// thread's next span while it has fewer than [`SPARES`]; freed otherwise.
#[inline]
fn put_away(mut kept: Box<Kept>) {
    kept.fields.n = 0;
    kept.fields.text.clear();
    #[cfg(feature = "otel-trace")]
    {
        kept.trace_id = None;
        kept.span_id = None;
    }
    // A thread being torn down (its spares gone) frees it.
    let _ = SPARE.try_with(move |s| {
        let n = s.n.get();
        if let Some(place) = s.kept.get(n) {
            // The place is empty (the first `n` hold the spares).
            if let Some(other) = place.replace(Some(kept)) {
                drop_record(other);
            }
            s.n.set(n + 1);
        }
    });
}

/// Frees a record, out of the way of the usual paths.
#[cold]
#[inline(never)]
fn drop_record(kept: Box<Kept>) {
    drop(kept);
}

/// A span's fields as text, without a map or an allocation per field.
struct Fields {
    /// Each field's name and where its value ends in `text`, in recording order.
    names: [&'static str; MAX_FIELDS],
    ends: [u16; MAX_FIELDS],
    n: usize,
    text: Text,
}

impl Default for Fields {
    fn default() -> Fields {
        Fields {
            names: [""; MAX_FIELDS],
            ends: [0; MAX_FIELDS],
            n: 0,
            text: Text::default(),
        }
    }
}

impl Fields {
    /// The fields, in recording order.
    fn fields(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        let text = self.text.as_str();
        (0..self.n).map(move |i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
            let end = self.ends[i] as usize;
            (self.names[i], text.get(start..end).unwrap_or(""))
        })
    }

    /// The fields as a report shows them: by name, the last value of a name recorded twice.
    fn to_map(&self) -> BTreeMap<String, String> {
        self.fields()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Records `values` (an `Attributes` or a `Record`): each value formatted and cut at
    /// [`MAX_VALUE_BYTES`], at most [`MAX_FIELDS`] fields.
    ///
    /// All the values are formatted in one `core::fmt::write`: its `Formatter` (which only
    /// `write` makes) is handed to each value's `Debug` in turn, instead of one `write` per value.
    fn record(&mut self, values: &impl Values) {
        if values.none() {
            return;
        }
        let mut sheet = Sheet {
            fields: self,
            limit: 0,
        };
        let sheet: *mut Sheet<'_> = &mut sheet;
        let all = AllValues { sheet, values };
        // Errors are a value cut (`Pen`), which stops only that value.
        let _ = std::fmt::write(&mut Pen(sheet), format_args!("{all}"));
    }

    /// Appends field `name` with `value` as it is (no formatting; at most [`MAX_FIELDS`]
    /// fields: a new name past that is left out).
    #[inline]
    fn push(&mut self, name: &'static str, value: &str) {
        let n = self.n;
        if n >= MAX_FIELDS {
            return;
        }
        let (len, v) = (self.text.len, value.len());
        if v <= 16 && self.text.heap.is_none() {
            if let Some(room) = self.text.inline.get_mut(len..len + v) {
                copy_short(room, value.as_bytes());
                self.text.len = len + v;
                self.end_value(n, name);
                return;
            }
        }
        self.push_long(n, name, value);
    }

    /// [`push`](Self::push) of a value of more than 16 bytes, or past the inline room: out of
    /// line, so that the short one calls nothing.
    #[inline(never)]
    fn push_long(&mut self, n: usize, name: &'static str, value: &str) {
        self.text.push_str(value);
        self.end_value(n, name);
    }

    /// Makes the text's end the end of field `n` (the next one, below [`MAX_FIELDS`]), named
    /// `name`.
    #[inline(always)]
    fn end_value(&mut self, n: usize, name: &'static str) {
        if n < MAX_FIELDS {
            self.names[n] = name;
            // At most 16 values of at most 132 bytes (`Pen` writes no further than that;
            // values kept as they are have at most 128): the end fits.
            self.ends[n] = self.text.len() as u16;
            self.n = n + 1;
        }
    }

    /// The fields of `newer` (an `on_record`) merged in: a value recorded again replaces the
    /// old one; new names are kept while there is room.
    fn merge(&mut self, newer: &Fields) {
        let mut all: Vec<(&'static str, String)> =
            self.fields().map(|(k, v)| (k, v.to_owned())).collect();
        for (k, v) in newer.fields() {
            match all.iter().position(|(name, _)| *name == k) {
                Some(i) => all[i].1 = v.to_owned(),
                None if all.len() < MAX_FIELDS => all.push((k, v.to_owned())),
                None => {}
            }
        }
        self.n = 0;
        self.text = Text::default();
        for (k, v) in all {
            self.push(k, &v);
        }
    }
}

/// Cuts the value that starts at `start` of `text` to [`MAX_VALUE_BYTES`] (at a character
/// boundary) and marks it cut with `…`.
#[cold]
fn cut_value(text: &mut Text, start: usize) {
    let mut cut = start + MAX_VALUE_BYTES;
    while !text.as_str().is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("…");
}

/// Copies `src` (at most 16 bytes) into `dst`, of the same length: two overlapping moves of 8,
/// 4 or 1 bytes.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() {
        return;
    }
    if n >= 8 {
        if let (Some(d), Some(s)) = (dst.get_mut(..8), src.get(..8)) {
            d.copy_from_slice(s);
        }
        if let (Some(d), Some(s)) = (dst.get_mut(n - 8..), src.get(n - 8..)) {
            if d.len() == 8 {
                d.copy_from_slice(s);
            }
        }
    } else if n >= 4 {
        if let (Some(d), Some(s)) = (dst.get_mut(..4), src.get(..4)) {
            d.copy_from_slice(s);
        }
        if let (Some(d), Some(s)) = (dst.get_mut(n - 4..), src.get(n - 4..)) {
            if d.len() == 4 {
                d.copy_from_slice(s);
            }
        }
    } else if n > 0 {
        // 1 to 3 bytes: the first, the middle and the last.
        for i in [0, n / 2, n - 1] {
            if let (Some(d), Some(s)) = (dst.get_mut(i), src.get(i)) {
                *d = *s;
            }
        }
    }
}

/// Text kept in place up to [`INLINE_TEXT`] bytes, then all of it on the heap. Only whole
/// characters are pushed, so it is always UTF-8.
struct Text {
    /// Bytes of text, wherever it is.
    len: usize,
    inline: [u8; INLINE_TEXT],
    /// All of the text, once it outgrew `inline`.
    heap: Option<String>,
}

impl Default for Text {
    fn default() -> Text {
        Text {
            len: 0,
            inline: [0; INLINE_TEXT],
            heap: None,
        }
    }
}

impl Text {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    fn as_str(&self) -> &str {
        match &self.heap {
            Some(h) => h,
            None => std::str::from_utf8(&self.inline[..self.len]).unwrap_or(""),
        }
    }

    /// Appends `s`. A short one that fits in place is copied with a few moves, not a call to
    /// `memcpy` (most values written are a few bytes: a method, a version, a number).
    #[inline]
    fn push_str(&mut self, s: &str) {
        if !self.push_short(s) {
            self.push_str_long(s);
        }
    }

    /// Appends `s` if it is short (at most 16 bytes) and fits in place, with a few moves;
    /// `false` (nothing appended) otherwise.
    #[inline(always)]
    fn push_short(&mut self, s: &str) -> bool {
        let (len, n) = (self.len, s.len());
        if n <= 16 && self.heap.is_none() {
            if let Some(room) = self.inline.get_mut(len..len + n) {
                copy_short(room, s.as_bytes());
                self.len = len + n;
                return true;
            }
        }
        false
    }

    /// [`push_str`](Self::push_str) of more than 16 bytes, or past the inline room.
    #[inline(never)]
    fn push_str_long(&mut self, s: &str) {
        if self.heap.is_none() {
            if let Some(room) = self.inline.get_mut(self.len..self.len + s.len()) {
                room.copy_from_slice(s.as_bytes());
                self.len += s.len();
                return;
            }
        }
        self.push_str_heap(s);
    }

    /// [`push_str`](Self::push_str) past the inline room: all of the text moves to the heap.
    #[cold]
    #[inline(never)]
    fn push_str_heap(&mut self, s: &str) {
        let heap = self.heap.get_or_insert_with(|| {
            let mut heap = String::with_capacity(2 * (self.len + s.len()));
            heap.push_str(std::str::from_utf8(&self.inline[..self.len]).unwrap_or(""));
            heap
        });
        heap.push_str(s);
        self.len = heap.len();
    }

    /// Empty again, in place, for another span.
    #[inline]
    fn clear(&mut self) {
        self.len = 0;
        if self.heap.is_some() {
            self.free_heap();
        }
    }

    #[cold]
    #[inline(never)]
    fn free_heap(&mut self) {
        self.heap = None;
    }

    fn truncate(&mut self, len: usize) {
        if let Some(h) = &mut self.heap {
            h.truncate(len);
        }
        self.len = self.len.min(len);
    }
}

/// What the values of a span are formatted into: its fields, and how far the value being
/// formatted may go. Shared by [`ValueVisitor`] (which marks where each value starts and ends)
/// and [`Pen`] (which the values' `Debug`/`Display` write to), one at a time: each holds a raw
/// pointer to it, and a reference made from it lives only within one of their calls, never
/// across a call that may reach the other (a value's `fmt`).
struct Sheet<'a> {
    fields: &'a mut Fields,
    /// The text's length the value being formatted may reach: a little more than
    /// [`MAX_VALUE_BYTES`], enough to tell it was longer.
    limit: usize,
}

/// The writer under the one `Formatter` of [`Fields::record`]: appends to the sheet's text up to
/// its limit, then fails the write, which stops that value's formatting (an `#[instrument]`ed
/// request body is not formatted whole, inside a poll, to be cut).
struct Pen<'a>(*mut Sheet<'a>);

impl std::fmt::Write for Pen<'_> {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        // SAFETY: the sheet lives on `Fields::record`'s stack for as long as the `write` this
        // pen is under; this reference ends with the call, which calls out to no other code.
        let sheet = unsafe { &mut *self.0 };
        let text = &mut sheet.fields.text;
        // The usual write: a few bytes, in place, under the limit.
        if text.len + s.len() <= sheet.limit && text.push_short(s) {
            return Ok(());
        }
        write_long(text, sheet.limit, s)
    }
}

/// [`Pen`]'s `write_str` of more than 16 bytes, past the inline room or past the limit.
#[inline(never)]
fn write_long(text: &mut Text, limit: usize, s: &str) -> std::fmt::Result {
    if s.len() <= limit.saturating_sub(text.len()) {
        text.push_str(s);
        return Ok(());
    }
    write_cut(text, limit, s)
}

/// The part of `s` that fits below `limit`, then an error that stops the formatting.
#[cold]
fn write_cut(text: &mut Text, limit: usize, s: &str) -> std::fmt::Result {
    let mut end = limit.saturating_sub(text.len()).min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    text.push_str(&s[..end]);
    Err(std::fmt::Error)
}

/// A span's values: an `Attributes` (at creation) or a `Record` (`Span::record`).
trait Values {
    /// Visits each value.
    fn visit(&self, visitor: &mut dyn Visit);

    /// Whether there is surely no value (a span with no fields: nothing to format).
    fn none(&self) -> bool {
        false
    }
}

impl Values for Attributes<'_> {
    #[inline]
    fn visit(&self, visitor: &mut dyn Visit) {
        self.record(visitor);
    }

    #[inline]
    fn none(&self) -> bool {
        self.fields().is_empty()
    }
}

impl Values for Record<'_> {
    #[inline]
    fn visit(&self, visitor: &mut dyn Visit) {
        self.record(visitor);
    }
}

/// All of a span's values, as the one argument of [`Fields::record`]'s `write`: formatting it
/// visits them with the `Formatter`.
struct AllValues<'a, 'v, V> {
    sheet: *mut Sheet<'a>,
    values: &'v V,
}

impl<V: Values> std::fmt::Display for AllValues<'_, '_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.values.visit(&mut ValueVisitor {
            sheet: self.sheet,
            f,
        });
        Ok(())
    }
}

/// Visits a span's values: a `&str` that fits is copied as it is, any other value formatted
/// with the one `Formatter`.
struct ValueVisitor<'a, 'f, 'g> {
    sheet: *mut Sheet<'a>,
    f: &'f mut std::fmt::Formatter<'g>,
}

impl ValueVisitor<'_, '_, '_> {
    /// Formats `value` as field `name` (`Debug` or `Display`, as `fmt` calls it).
    #[inline]
    fn format(
        &mut self,
        name: &'static str,
        fmt: impl FnOnce(&mut std::fmt::Formatter<'_>) -> std::fmt::Result,
    ) {
        let (n, start) = {
            // SAFETY: see `Sheet`: this reference ends before `fmt` (which writes through the
            // pen) runs.
            let sheet = unsafe { &mut *self.sheet };
            let n = sheet.fields.n;
            if n >= MAX_FIELDS {
                return;
            }
            let start = sheet.fields.text.len();
            sheet.limit = start + MAX_VALUE_BYTES + 4;
            (n, start)
        };
        // An error is the value cut (`Pen`) or the value's own: what it wrote is kept.
        let _ = fmt(self.f);
        // SAFETY: see `Sheet`: `fmt` has returned; no other reference to it is live. (A span
        // made by `fmt` has a record of its own: `n` is still this one's.)
        let fields = &mut *unsafe { &mut *self.sheet }.fields;
        if fields.text.len().saturating_sub(start) > MAX_VALUE_BYTES {
            cut_value(&mut fields.text, start);
        }
        fields.end_value(n, name);
    }
}

impl ValueVisitor<'_, '_, '_> {
    /// A `&str` longer than kept: formatted (`Display`), which cuts it. Out of line: the usual
    /// short one is copied with nothing called.
    #[cold]
    #[inline(never)]
    fn format_long_str(&mut self, name: &'static str, value: &str) {
        self.format(name, |f| std::fmt::Display::fmt(value, f));
    }
}

impl Visit for ValueVisitor<'_, '_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if value.len() <= MAX_VALUE_BYTES {
            // As it is: no formatting.
            // SAFETY: see `Sheet`: this reference ends with the call, which calls no value's
            // `fmt`.
            unsafe { &mut *self.sheet }.fields.push(field.name(), value);
        } else {
            self.format_long_str(field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.format(field.name(), |f| value.fmt(f));
    }
}

/// The parts of the table of open spans (a power of two): two threads wait for each other only
/// when they create, record on or close spans of the same part at the same moment (or the
/// watchdog copies one out).
pub(crate) const SHARDS: usize = 64;

/// The multiplier that spreads span ids (2^64 / φ): the top bits of the product pick the part,
/// the bits below them the place in the part.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// One part of the table: open spans by (layer instance, span id), in open addressing with
/// linear probing (at most half full), removal by moving later entries back (no tombstones).
/// A record moves in and out by pointer.
struct Table {
    /// A power of two of places, or none yet.
    places: Vec<Place>,
    /// Places in use.
    len: usize,
}

/// A place in a [`Table`]: empty when `kept` is `None`.
struct Place {
    layer: u64,
    id: u64,
    kept: Option<Box<Kept>>,
}

impl Table {
    const fn new() -> Table {
        Table {
            places: Vec::new(),
            len: 0,
        }
    }

    /// The place where span `id`'s search starts: the bits of the spread id below the part's.
    #[inline]
    fn home(&self, id: u64) -> usize {
        (id.wrapping_mul(SPREAD) >> 26) as usize & self.places.len().wrapping_sub(1)
    }

    /// Where (`layer`, `id`) is, if it is.
    #[inline]
    fn find(&self, layer: u64, id: u64) -> Option<usize> {
        let mask = self.places.len().wrapping_sub(1);
        let mut i = self.home(id);
        loop {
            let place = self.places.get(i)?;
            place.kept.as_ref()?;
            if place.id == id && place.layer == layer {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Keeps `kept` as (`layer`, `id`); returns the record it replaces (an id reused after a
    /// close this layer missed).
    #[inline]
    fn insert(&mut self, layer: u64, id: u64, kept: Box<Kept>) -> Option<Box<Kept>> {
        if 2 * (self.len + 1) > self.places.len() {
            self.grow();
        }
        let mask = self.places.len() - 1;
        let mut i = self.home(id);
        while let Some(place) = self.places.get_mut(i) {
            if place.kept.is_none() {
                *place = Place {
                    layer,
                    id,
                    kept: Some(kept),
                };
                self.len += 1;
                return None;
            }
            if place.id == id && place.layer == layer {
                return place.kept.replace(kept);
            }
            i = (i + 1) & mask;
        }
        // Never: the table always has an empty place.
        Some(kept)
    }

    /// Twice the places (at least 16), every record put back.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        self.resize((2 * self.places.len()).max(16));
    }

    /// Half the places, every record put back: after a burst of open spans, a part's places go
    /// as its spans close (a quarter full at most after, so that it does not grow right back).
    #[cold]
    #[inline(never)]
    fn shrink(&mut self) {
        self.resize(self.places.len() / 2);
    }

    /// `places` places (a power of two, more than twice the records), every record put back.
    fn resize(&mut self, places: usize) {
        let old = std::mem::replace(
            &mut self.places,
            (0..places)
                .map(|_| Place {
                    layer: 0,
                    id: 0,
                    kept: None,
                })
                .collect(),
        );
        self.len = 0;
        for place in old {
            if let Some(kept) = place.kept {
                self.insert(place.layer, place.id, kept);
            }
        }
    }

    /// The record of (`layer`, `id`).
    fn get(&self, layer: u64, id: u64) -> Option<&Kept> {
        self.places[self.find(layer, id)?].kept.as_deref()
    }

    fn get_mut(&mut self, layer: u64, id: u64) -> Option<&mut Kept> {
        let i = self.find(layer, id)?;
        self.places[i].kept.as_deref_mut()
    }

    /// Takes the record of (`layer`, `id`) out; the entries after it that would no longer be
    /// found move back.
    #[inline]
    fn remove(&mut self, layer: u64, id: u64) -> Option<Box<Kept>> {
        let mut hole = self.find(layer, id)?;
        let gone = self.places[hole].kept.take();
        self.len -= 1;
        let mask = self.places.len() - 1;
        let mut i = (hole + 1) & mask;
        // Up to the next empty place.
        while let Some(place) = self.places.get(i).filter(|p| p.kept.is_some()) {
            // The entry at `i` moves to the hole if its search passes there: the hole lies
            // between its home and `i`.
            let home = self.home(place.id);
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                // The hole is empty: the entry moves there, the hole to `i`.
                self.places.swap(hole, i);
                hole = i;
            }
            i = (i + 1) & mask;
        }
        if self.places.len() > 16 && 8 * self.len < self.places.len() {
            self.shrink();
        }
        gone
    }

    /// Every record of layer `layer` dropped.
    fn remove_layer(&mut self, layer: u64) {
        let old = std::mem::take(&mut self.places);
        self.len = 0;
        for place in old {
            if let Some(kept) = place.kept {
                if place.layer != layer {
                    self.insert(place.layer, place.id, kept);
                }
            }
        }
    }

    /// The (layer, id) of every record.
    #[cfg(test)]
    fn keys(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.places
            .iter()
            .filter(|p| p.kept.is_some())
            .map(|p| (p.layer, p.id))
    }
}

type Shard = Mutex<Table>;

/// Open spans, by (layer instance, span id).
static LIVE: [Shard; SHARDS] = [const { Mutex::new(Table::new()) }; SHARDS];

/// The id's top bits that do not pick its part: the registry's slot generation (sharded-slab's
/// default layout on 64-bit targets: a 38-bit address in the thread's shard, a 13-bit shard
/// index, a 13-bit generation, most significant last).
const GENERATION_BITS: u32 = 13;

/// The part holding span `id`: the id without its generation, multiplied by a large odd
/// constant, the product's top bits, which spread consecutive ids and ids of different threads.
///
/// Not the generation: the registry gives a thread's next span the slot its last closed span
/// freed, a new generation of the same address, so a worker's spans one after another stay in
/// one part, whose lock and table lines stay in its core's cache. With the generation in the
/// hash, every span landed in a part chosen anew, most often one another core wrote last, and
/// its insert and removal waited for the lines to come over (docs/overhead.md, the contention
/// table: two workers on two cores took 30 ns more a request than the same work on one). Ids of
/// other subscribers are spread the same way; those that differ in their top bits only share a
/// part, and its table tells them apart.
#[inline]
fn shard(id: u64) -> &'static Shard {
    let mixed = (id << GENERATION_BITS).wrapping_mul(SPREAD) >> 58;
    &LIVE[mixed as usize % SHARDS]
}

/// Locks a part. Its lock is held only by pinwatch's code, which never panics holding it; a
/// poisoned one is used as it is.
#[inline]
fn lock(shard: &'static Shard) -> std::sync::MutexGuard<'static, Table> {
    shard.lock().unwrap_or_else(|p| p.into_inner())
}

/// Layer instances: span ids are per subscriber, and a process may have more than one.
static NEXT_LAYER: AtomicU64 = AtomicU64::new(1);

/// The `tracing_subscriber::Layer` that puts the span chain (and the OpenTelemetry ids, with the
/// `otel-trace` feature) on every pinned event. Add it last, after the OpenTelemetry layer if you
/// have one:
///
/// ```no_run
/// use tracing_subscriber::prelude::*;
///
/// tracing_subscriber::registry()
///     .with(tracing_subscriber::fmt::layer())
///     .with(pinwatch::tracing_layer())
///     .init();
/// ```
///
/// Entering and exiting a span costs a few stores on a watched worker (no allocation, lock or
/// system call); creating a span formats its fields (at most [`MAX_FIELDS`], each cut at
/// [`MAX_VALUE_BYTES`]) into one buffer, kept in a table of pinwatch's own split 64 ways by span
/// id until the span closes (docs/overhead.md gives the instructions). A pinned event carries
/// at most [`MAX_SPANS`] spans.
pub fn tracing_layer() -> SpanLayer {
    SpanLayer {
        instance: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
        #[cfg(feature = "otel-trace")]
        dispatch: std::sync::OnceLock::new(),
    }
}

/// Dropped (its subscriber dropped, or the layer swapped out by `tracing_subscriber::reload`):
/// what it keeps goes too, even of spans still open, whose closes it will not hear.
impl Drop for SpanLayer {
    fn drop(&mut self) {
        for part in &LIVE {
            // `Kept` holds no value of the service's: nothing runs on drop under the lock.
            lock(part).remove_layer(self.instance);
        }
    }
}

/// The layer [`tracing_layer()`] returns.
#[derive(Debug)]
pub struct SpanLayer {
    instance: u64,
    /// The subscriber the layer is part of, to ask `tracing-opentelemetry` for a span's context.
    #[cfg(feature = "otel-trace")]
    dispatch: std::sync::OnceLock<tracing::dispatcher::WeakDispatch>,
}

#[cfg(feature = "otel-trace")]
impl SpanLayer {
    /// The OpenTelemetry trace and span id of span `id` (hex), when `tracing-opentelemetry`'s
    /// layer is in the subscriber and gave it a valid context. Starts the OpenTelemetry span now
    /// (it would start when first entered), so that its ids exist.
    fn otel_ids(&self, id: &Id) -> (Option<String>, Option<String>) {
        use opentelemetry::trace::TraceContextExt;
        let Some(dispatch) = self.dispatch.get().and_then(|d| d.upgrade()) else {
            return (None, None);
        };
        let Some(cx) = tracing_opentelemetry::get_otel_context(id, &dispatch) else {
            return (None, None);
        };
        let span = cx.span();
        let sc = span.span_context();
        if !sc.is_valid() {
            return (None, None);
        }
        (
            Some(sc.trace_id().to_string()),
            Some(sc.span_id().to_string()),
        )
    }
}

impl SpanLayer {
    /// The parent of new span `id` as this layer sees it, what `ctx.span(id)?.parent()` says
    /// (a per-layer filter leaves out the spans it filters), looked up in the registry only when
    /// this layer does not keep the span's direct parent: that is the registry's parent (the
    /// explicit one, or the current span for a contextual span), and a span this layer keeps
    /// is one its filter let through. A root span has none.
    fn parent<S>(&self, attrs: &Attributes<'_>, id: &Id, ctx: &Context<'_, S>) -> Option<u64>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let direct = if attrs.is_root() {
            return None;
        } else if attrs.is_contextual() {
            let current = ctx.current_span();
            match current.id() {
                Some(id) => id.into_u64(),
                // No current span: a root, as the registry makes it.
                None if current.is_known() => return None,
                // A subscriber that does not say (`current_span`'s default): the registry's.
                None => return Self::registry_parent(id, ctx),
            }
        } else {
            attrs.parent()?.into_u64()
        };
        if lock(shard(direct)).find(self.instance, direct).is_some() {
            return Some(direct);
        }
        Self::registry_parent(id, ctx)
    }

    /// The parent of span `id` as the registry and this layer's filter see it.
    #[cold]
    fn registry_parent<S>(id: &Id, ctx: &Context<'_, S>) -> Option<u64>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        ctx.span(id)
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64())
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    #[cfg(feature = "otel-trace")]
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        let _ = self.dispatch.set(subscriber.downgrade());
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = self.parent(attrs, id, &ctx);
        let mut kept = spare(attrs.metadata(), parent);
        // Formatted before any lock is taken: a value's `Debug` is the service's code.
        kept.fields.record(attrs);
        #[cfg(feature = "otel-trace")]
        {
            (kept.trace_id, kept.span_id) = self.otel_ids(id);
        }
        let id = id.into_u64();
        // The old value of a reused id (a close this layer missed) is put away after the unlock.
        let old = lock(shard(id)).insert(self.instance, id, kept);
        if let Some(old) = old {
            put_away(old);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        // Formatted before the lock: a value's `Debug` is the service's code, and may make a
        // span itself (whose `on_new_span` may take the same part's lock).
        let mut recorded = Fields::default();
        recorded.record(values);
        if recorded.n == 0 {
            return;
        }
        let id = id.into_u64();
        if let Some(k) = lock(shard(id)).get_mut(self.instance, id) {
            k.fields.merge(&recorded);
        }
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        with_slot(|slot| {
            slot.spans
                .push(self.instance, id.into_u64(), slot.poll.seq())
        });
    }

    fn on_exit(&self, id: &Id, _ctx: Context<'_, S>) {
        with_slot(|slot| slot.spans.pop(self.instance, id.into_u64()));
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let id = id.into_u64();
        // Put away after the unlock.
        let gone = lock(shard(id)).remove(self.instance, id);
        if let Some(gone) = gone {
            put_away(gone);
        }
    }
}

/// Runs `f` on the calling thread's slot, whatever table it is in; does nothing on a thread
/// with no slot.
#[inline(always)]
fn with_slot(f: impl FnOnce(&Slot)) {
    let p = current_slot_any();
    if !p.is_null() {
        // SAFETY: a non-null `current_slot_any` is the slot the thread's claim keeps alive as
        // long as the thread's `Current` points at it; only this thread replaces its claim, and
        // `f` (a few stores) does not.
        f(unsafe { &*p });
    }
}

/// What a pinned event says about its spans.
#[derive(Default)]
pub(crate) struct Captured {
    pub spans: Vec<SpanInfo>,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
}

/// A span of tokio's own instrumentation (`runtime.spawn`, `runtime.resource`, …: targets
/// `tokio::…` and `runtime::…`).
fn is_runtimes(info: &SpanInfo) -> bool {
    info.name.starts_with("runtime.")
        || info.target.starts_with("tokio::")
        || info.target.starts_with("runtime::")
}

/// The spans poll `poll` of `slot` is in: the innermost entered during that poll and its parents,
/// outermost first. Watchdog side.
pub(crate) fn capture(slot: &Slot, poll: u64) -> Captured {
    match slot.spans.innermost(poll) {
        Some(e) => walk_entered(e),
        None => Captured::default(),
    }
}

/// The chain of span `id` of layer instance `layer` (the innermost one a poll entered):
/// outermost first, those still open.
#[cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]
pub(crate) fn chain(layer: u64, id: u64) -> Vec<SpanInfo> {
    walk_entered(crate::poll::span_stack::Entered { layer, id }).spans
}

fn walk_entered(e: crate::poll::span_stack::Entered) -> Captured {
    let mut out = Captured::default();
    let mut next = Some(e.id);
    // Bounded also in steps: span ids are reused once closed, so a stale parent link could in
    // principle lead back into the chain.
    let mut steps = 0;
    while let Some(id) = next {
        steps += 1;
        if out.spans.len() >= MAX_SPANS || steps > 4 * MAX_SPANS {
            break;
        }
        // One part locked at a time, for a copy.
        let found = lock(shard(id)).get(e.layer, id).map(|k| {
            let info = SpanInfo {
                name: k.meta.name().to_owned(),
                target: k.meta.target().to_owned(),
                fields: k.fields.to_map(),
            };
            #[cfg(feature = "otel-trace")]
            let ids = (k.trace_id.clone(), k.span_id.clone());
            #[cfg(not(feature = "otel-trace"))]
            let ids: (Option<String>, Option<String>) = (None, None);
            (info, k.parent, ids)
        });
        let Some((info, parent, (trace_id, span_id))) = found else {
            break;
        };
        next = parent;
        if is_runtimes(&info) {
            // tokio's own instrumentation (its `tracing` feature: the task span it enters
            // around every poll, resources): not the service's request. Walked through, so
            // that the spans a task was spawned in still show.
            continue;
        }
        if out.trace_id.is_none() && trace_id.is_some() {
            out.trace_id = trace_id;
            out.span_id = span_id;
        }
        out.spans.push(info);
    }
    out.spans.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tracing_subscriber::prelude::*;

    /// A value whose `Debug` writes `chunks` pieces of 1 KiB, counting those written.
    struct Huge {
        chunks: usize,
        written: AtomicUsize,
    }

    impl std::fmt::Debug for Huge {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let piece = "b".repeat(1024);
            for _ in 0..self.chunks {
                f.write_str(&piece)?;
                self.written.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    }

    /// Runs `f` with a registry and a new layer as the default subscriber; `f` gets the
    /// layer's instance.
    fn with_layer(f: impl FnOnce(u64)) {
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || f(instance));
    }

    /// The chain of `span` in the layer `instance` of the current subscriber.
    fn chain_of(instance: u64, span: &tracing::Span) -> Vec<SpanInfo> {
        walk_entered(crate::poll::span_stack::Entered {
            layer: instance,
            id: span.id().expect("the span is enabled").into_u64(),
        })
        .spans
    }

    /// Fields are kept up to [`MAX_FIELDS`], in place while short and on the heap once long;
    /// a value recorded again replaces the old one; a recorded new name takes room left.
    #[test]
    fn fields_are_kept_bounded_and_recorded_values_replace_old_ones() {
        with_layer(|instance| {
            let long = "x".repeat(100);
            let span = tracing::info_span!(
                "many",
                f0 = 0, f1 = 1, f2 = 2, f3 = 3, f4 = 4, f5 = 5, f6 = 6, f7 = 7,
                f8 = 8, f9 = 9, f10 = 10, f11 = 11, f12 = 12, f13 = 13, f14 = %long,
                f15 = tracing::field::Empty, f16 = 16, f17 = 17,
            );
            let fields = &chain_of(instance, &span)[0].fields;
            // Fifteen recorded at creation (f15 is empty), then the cap: f16 is one too many.
            assert_eq!(fields.len(), MAX_FIELDS, "{fields:?}");
            assert_eq!(fields["f14"], long);
            assert!(!fields.contains_key("f17"), "{fields:?}");
            span.record("f3", "three");
            span.record("f15", 15);
            let fields = &chain_of(instance, &span)[0].fields;
            assert_eq!(fields["f3"], "three");
            assert_eq!(fields["f14"], long);
            // No room was left for a sixteenth name.
            assert_eq!(fields.len(), MAX_FIELDS, "{fields:?}");
            let small = tracing::info_span!("small", a = "x", b = tracing::field::Empty);
            small.record("b", 2);
            small.record("a", "é");
            let fields = &chain_of(instance, &small)[0].fields;
            assert_eq!(fields.len(), 2, "{fields:?}");
            assert_eq!((fields["a"].as_str(), fields["b"].as_str()), ("é", "2"));
        });
    }

    /// A value written in small pieces, each `piece` repeated `times` times; `fail_after`
    /// pieces, it returns an error of its own (and ignores the cut's).
    struct Pieces {
        piece: &'static str,
        times: usize,
        fail_after: usize,
    }

    impl std::fmt::Debug for Pieces {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            for i in 0..self.times {
                if i == self.fail_after {
                    return Err(std::fmt::Error);
                }
                // Ignores the cut: a value may; what it writes past it is not kept.
                let _ = f.write_str(self.piece);
            }
            Ok(())
        }
    }

    /// All values are formatted with one `Formatter`: a value cut at [`MAX_VALUE_BYTES`] (at a
    /// character boundary, its pieces split across it), a value failing on its own, and a
    /// long `&str` end where they should, and the values after them are whole.
    #[test]
    fn values_are_cut_at_a_character_boundary_and_the_next_ones_are_whole() {
        with_layer(|instance| {
            // 'é' is two bytes, '€' three: 43 '€' are 129 bytes, the 43rd across 128.
            let euros = Pieces {
                piece: "€",
                times: 1000,
                fail_after: usize::MAX,
            };
            let failing = Pieces {
                piece: "ab",
                times: 10,
                fail_after: 3,
            };
            let long = "é".repeat(100);
            let span = tracing::info_span!(
                "cuts",
                euros = ?euros,
                after = 1,
                failing = ?failing,
                long = long.as_str(),
                exact = "x".repeat(MAX_VALUE_BYTES).as_str(),
                display = %"y".repeat(MAX_VALUE_BYTES + 1),
                last = "end",
            );
            let fields = &chain_of(instance, &span)[0].fields;
            assert_eq!(fields["euros"], format!("{}…", "€".repeat(42)));
            assert_eq!(fields["after"], "1");
            assert_eq!(fields["failing"], "ababab");
            assert_eq!(fields["long"], format!("{}…", "é".repeat(64)));
            assert_eq!(fields["exact"], "x".repeat(MAX_VALUE_BYTES));
            assert_eq!(
                fields["display"],
                format!("{}…", "y".repeat(MAX_VALUE_BYTES))
            );
            assert_eq!(fields["last"], "end");
            assert_eq!(fields.len(), 7, "{fields:?}");
        });
    }

    /// A span with no fields is kept (nothing formatted); one whose fields are all empty too,
    /// and a value recorded later shows.
    #[test]
    fn spans_without_values_are_kept() {
        with_layer(|instance| {
            let bare = tracing::info_span!("bare");
            let chain = chain_of(instance, &bare);
            assert_eq!((chain[0].name.as_str(), chain[0].fields.len()), ("bare", 0));
            let empty = tracing::info_span!("empty", a = tracing::field::Empty);
            assert!(chain_of(instance, &empty)[0].fields.is_empty());
            empty.record("a", 1);
            assert_eq!(chain_of(instance, &empty)[0].fields["a"], "1");
        });
    }

    /// Values recorded later (`Span::record`) are formatted the same way and merged: a cut
    /// value stays cut once, a value recorded again replaces the old one.
    #[test]
    fn recorded_values_are_cut_and_merged() {
        with_layer(|instance| {
            let span = tracing::info_span!(
                "later",
                a = tracing::field::Empty,
                b = "first",
                c = tracing::field::Empty,
            );
            span.record("a", tracing::field::debug(&"z".repeat(300)));
            span.record("b", "second");
            let fields = &chain_of(instance, &span)[0].fields;
            let cut = format!("\"{}…", "z".repeat(MAX_VALUE_BYTES - 1));
            assert_eq!(fields["a"], cut);
            assert_eq!(fields["b"], "second");
            assert!(!fields.contains_key("c"), "{fields:?}");
            // Merged again: the cut value is kept as it was, not cut a second time.
            span.record("c", 3u8);
            let fields = &chain_of(instance, &span)[0].fields;
            assert_eq!(fields["a"], cut);
            assert_eq!(
                (fields["b"].as_str(), fields["c"].as_str()),
                ("second", "3")
            );
        });
    }

    /// Two subscribers number their spans alike: each layer finds its own span, never the
    /// other's.
    #[test]
    fn two_subscribers_spans_of_the_same_id_stay_apart() {
        let (a, b) = (tracing_layer(), tracing_layer());
        let (ia, ib) = (a.instance, b.instance);
        let sa = tracing_subscriber::registry().with(Some(a));
        let sb = tracing_subscriber::registry().with(Some(b));
        let span_a = tracing::subscriber::with_default(sa, || {
            tracing::info_span!("a_request", secret = "a's")
        });
        let span_b = tracing::subscriber::with_default(sb, || {
            tracing::info_span!("b_request", secret = "b's")
        });
        assert_eq!(span_a.id(), span_b.id(), "the same id in both");
        let (ca, cb) = (chain_of(ia, &span_a), chain_of(ib, &span_b));
        assert_eq!(
            (ca[0].name.as_str(), ca[0].fields["secret"].as_str()),
            ("a_request", "a's")
        );
        assert_eq!(
            (cb[0].name.as_str(), cb[0].fields["secret"].as_str()),
            ("b_request", "b's")
        );
    }

    /// With a per-layer filter, a parent the filter leaves out (another layer takes it) is not
    /// on the chain.
    #[test]
    fn a_parent_the_layers_filter_leaves_out_is_not_shown() {
        use tracing_subscriber::filter::LevelFilter;
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
            .with(layer.with_filter(LevelFilter::INFO));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("connection");
            let hidden = tracing::debug_span!(parent: &outer, "excluded", peer = "10.0.0.1");
            let inner = tracing::info_span!(parent: &hidden, "request", uri = "/x");
            let names: Vec<String> = chain_of(instance, &inner)
                .into_iter()
                .map(|s| s.name)
                .collect();
            assert_eq!(names, ["connection", "request"]);
        });
    }

    /// The table against a map: ids that collide and wrap around the end, removals in
    /// random order (later entries moved back stay found), a reused id replacing its record,
    /// a layer's records removed, and growth.
    #[test]
    fn the_table_finds_what_it_keeps_through_collisions_removals_and_growth() {
        with_layer(|_| {
            let span = tracing::info_span!("t");
            let meta = span.metadata().expect("enabled");
            let mut table = Table::new();
            let mut model = std::collections::HashMap::new();
            // A small xorshift: the same order every run.
            let mut seed = 0x2545_F491_4F6C_DD1Du64;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            for step in 0..20_000u64 {
                let layer = 1 + next() % 2;
                // Few distinct ids, some far apart: many collisions and replacements.
                let id = match next() % 3 {
                    0 => 1 + next() % 64,
                    1 => (1 + next() % 64) << 40,
                    _ => 1 + next() % 4096,
                };
                if next() % 3 == 0 {
                    let got = table.remove(layer, id).map(|k| k.parent);
                    assert_eq!(got, model.remove(&(layer, id)), "step {step}");
                } else {
                    let old = table
                        .insert(layer, id, spare(meta, Some(step)))
                        .map(|k| k.parent);
                    assert_eq!(old, model.insert((layer, id), Some(step)), "step {step}");
                }
                assert_eq!(table.len, model.len());
                if step % 997 == 0 {
                    for (&(layer, id), &parent) in &model {
                        assert_eq!(table.get(layer, id).map(|k| k.parent), Some(parent));
                    }
                    assert!(2 * table.len <= table.places.len().max(1));
                }
            }
            table.remove_layer(1);
            model.retain(|k, _| k.0 != 1);
            assert_eq!(table.len, model.len());
            let mut keys: Vec<_> = table.keys().collect();
            let mut expected: Vec<_> = model.keys().copied().collect();
            keys.sort_unstable();
            expected.sort_unstable();
            assert_eq!(keys, expected);
            for (&(layer, id), &parent) in &model {
                assert_eq!(table.get_mut(layer, id).map(|k| k.parent), Some(parent));
            }
        });
    }

    /// Text of every short length (copied with overlapping moves), then past the inline room
    /// (all of it moved to the heap), reads back as written.
    #[test]
    fn text_of_every_length_reads_back() {
        let mut text = Text::default();
        let mut expected = String::new();
        for n in 0..=20 {
            let piece: String = (0..n)
                .map(|i| char::from(b'a' + (n + i) as u8 % 26))
                .collect();
            text.push_str(&piece);
            expected.push_str(&piece);
            assert_eq!(text.as_str(), expected, "after {n} bytes");
            assert_eq!(text.len(), expected.len());
        }
        assert!(text.heap.is_some(), "210 bytes are past the inline room");
        text.truncate(3);
        text.push_str("é");
        assert_eq!(text.as_str(), format!("{}é", &expected[..3]));
        text.clear();
        text.push_str("xy");
        assert_eq!(text.as_str(), "xy");
    }

    /// What a layer keeps, in every part of the table.
    fn kept_by(instance: u64) -> usize {
        LIVE.iter()
            .map(|p| lock(p).keys().filter(|k| k.0 == instance).count())
            .sum()
    }

    /// A layer swapped out while spans are open (their closes go to its successor) leaves
    /// nothing behind.
    #[test]
    fn a_layer_reloaded_away_leaves_nothing_kept() {
        use tracing_subscriber::reload;
        let layer = tracing_layer();
        let instance = layer.instance;
        let (layer, handle) = reload::Layer::new(Some(layer));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            let open: Vec<_> = (0..100).map(|i| tracing::info_span!("conn", i)).collect();
            assert_eq!(kept_by(instance), 100);
            handle.reload(None).unwrap();
            assert_eq!(kept_by(instance), 0);
            drop(open);
        });
    }

    /// A closed span's record serves the thread's next span with nothing of the old one left
    /// (fields, a long value's heap text), and a thread keeps at most [`SPARES`] of them.
    #[test]
    fn a_closed_spans_record_is_reused_empty_and_spares_are_bounded() {
        with_layer(|instance| {
            let spares = || SPARE.with(|s| s.n.get());
            let long = "y".repeat(300);
            drop(tracing::info_span!("old", a = 1, b = %long, c = "c"));
            assert!(spares() >= 1, "the closed span's record is kept");
            let before = spares();
            let new = tracing::info_span!("new", d = 4);
            assert_eq!(spares(), before - 1, "the new span took it");
            let chain = chain_of(instance, &new);
            assert_eq!(chain.len(), 1, "{chain:?}");
            assert_eq!(chain[0].name, "new");
            let fields: Vec<(&str, &str)> = chain[0]
                .fields
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            assert_eq!(fields, [("d", "4")]);
            let open: Vec<_> = (0..3 * SPARES)
                .map(|i| tracing::info_span!("many", i))
                .collect();
            drop(open);
            assert_eq!(spares(), SPARES);
            // Kept empty: no heap text of a closed span lives on in a spare.
            SPARE.with(|s| {
                for place in &s.kept {
                    let k = place.take().expect("all places hold one");
                    assert!(
                        k.fields.n == 0 && k.fields.text.len == 0 && k.fields.text.heap.is_none()
                    );
                    place.set(Some(k));
                }
            });
            // docs/overhead.md: 512 bytes a record (560 with `otel-trace`), 32 a thread.
            let record = if cfg!(feature = "otel-trace") {
                560
            } else {
                512
            };
            assert_eq!(std::mem::size_of::<Kept>(), record);
        });
    }

    /// A closed span is gone from the chain: nothing of it is kept.
    #[test]
    fn a_closed_span_is_not_found() {
        with_layer(|instance| {
            let parent = tracing::info_span!("parent", p = 1);
            let child = tracing::info_span!(parent: &parent, "child", c = 2);
            let chain = chain_of(instance, &child);
            let names: Vec<&str> = chain.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["parent", "child"]);
            let id = child.id().unwrap().into_u64();
            drop(child);
            let gone = walk_entered(crate::poll::span_stack::Entered {
                layer: instance,
                id,
            });
            assert!(gone.spans.is_empty(), "{:?}", gone.spans);
        });
    }

    /// An `#[instrument]`ed handler taking a 64 MiB body: creating its span formats the body
    /// only as far as is kept, and keeps the value cut with `…`.
    #[test]
    fn a_huge_field_is_formatted_only_as_far_as_kept() {
        let body = Huge {
            chunks: 64 * 1024,
            written: AtomicUsize::new(0),
        };
        with_layer(|instance| {
            let span = tracing::info_span!("upload", body = ?body);
            let id = span.id().expect("the span is enabled");
            let chain = walk_entered(crate::poll::span_stack::Entered {
                layer: instance,
                id: id.into_u64(),
            });
            let kept = &chain.spans[0].fields["body"];
            assert!(
                kept.len() <= MAX_VALUE_BYTES + '…'.len_utf8(),
                "{}",
                kept.len()
            );
            assert!(kept.starts_with("bbbb") && kept.ends_with('…'), "{kept}");
        });
        let written = body.written.load(Ordering::Relaxed);
        assert!(written <= 1, "{written} KiB of the body were formatted");
    }
}

/// Review tests: the table, formatting and parents, attacked.
#[cfg(test)]
mod review_tests {
    use super::*;
    use std::collections::HashMap;
    use tracing_subscriber::prelude::*;

    fn with_layer(f: impl FnOnce(u64)) {
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || f(instance));
    }

    fn chain_of(instance: u64, span: &tracing::Span) -> Vec<SpanInfo> {
        walk_entered(crate::poll::span_stack::Entered {
            layer: instance,
            id: span.id().expect("the span is enabled").into_u64(),
        })
        .spans
    }

    fn names(c: &[SpanInfo]) -> Vec<String> {
        c.iter().map(|s| s.name.clone()).collect()
    }

    /// The inverse of SPREAD mod 2^64 (Newton).
    fn inverse_spread() -> u64 {
        let mut inv = SPREAD;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(SPREAD.wrapping_mul(inv)));
        }
        assert_eq!(inv.wrapping_mul(SPREAD), 1);
        inv
    }

    /// 100k random inserts/removals/lookups against a HashMap, with ids built to fall on the
    /// same part AND the same home place at every table size (their spread products differ
    /// only in the bits below 26), plus ordinary ids and two layers sharing ids.
    #[test]
    fn table_against_a_map_with_ids_colliding_on_part_and_place() {
        with_layer(|_| {
            let span = tracing::info_span!("t");
            let meta = span.metadata().expect("enabled");
            let inv = inverse_spread();
            let colliding = |k: u64, group: u64| -> u64 {
                // bits 45..51 (the part's, once shifted by the generation's 13): part 5;
                // bits 26..45: `group` (the place's); below: k.
                let p = (5u64 << 45) | (group << 26) | (k & ((1 << 26) - 1));
                p.wrapping_mul(inv)
            };
            for k in 0..50 {
                assert_eq!(shard(colliding(k, 3)) as *const _, &LIVE[5] as *const _);
            }
            let mut table = Table::new();
            let mut model: HashMap<(u64, u64), u64> = HashMap::new();
            let mut seed = 0xDEAD_BEEF_CAFE_F00Du64;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let mut max_places = 0;
            for step in 0..100_000u64 {
                let layer = 1 + next() % 2;
                let id = match next() % 4 {
                    0 | 1 => colliding(next() % 300, next() % 3),
                    2 => 1 + next() % 2000,
                    _ => next() | 1,
                };
                match next() % 5 {
                    0 | 1 => {
                        let got = table.remove(layer, id).map(|k| k.parent);
                        assert_eq!(got, model.remove(&(layer, id)).map(Some), "step {step}");
                    }
                    2 => {
                        let got = table.get(layer, id).map(|k| k.parent);
                        assert_eq!(
                            got,
                            model.get(&(layer, id)).map(|&p| Some(p)),
                            "step {step}"
                        );
                    }
                    _ => {
                        let old = table
                            .insert(layer, id, spare(meta, Some(step)))
                            .map(|k| k.parent);
                        assert_eq!(
                            old,
                            model.insert((layer, id), step).map(Some),
                            "step {step}"
                        );
                    }
                }
                assert_eq!(table.len, model.len());
                max_places = max_places.max(table.places.len());
                if step % 4999 == 0 {
                    for (&(l, i), &p) in &model {
                        assert_eq!(
                            table.get(l, i).map(|k| k.parent),
                            Some(Some(p)),
                            "step {step}"
                        );
                    }
                    assert_eq!(table.keys().count(), model.len());
                }
            }
            // Empty it: every one found and removed.
            let keys: Vec<_> = model.keys().copied().collect();
            for (l, i) in keys {
                assert!(table.remove(l, i).is_some());
                model.remove(&(l, i));
            }
            assert_eq!(table.len, 0);
            assert_eq!(table.keys().count(), 0);
        });
    }

    /// A worker's spans one after another (each closed before the next, as a worker serving
    /// requests makes them) stay in one part: the registry reuses the closed span's slot with a
    /// new generation, which does not pick the part. Were it to, each would land in a part the
    /// other workers wrote last (the contention table in docs/overhead.md).
    #[test]
    fn a_threads_spans_one_after_another_stay_in_one_part() {
        with_layer(|_| {
            let parts: std::collections::HashSet<usize> = (0..100)
                .map(|_| {
                    let span = tracing::info_span!("request", n = 1);
                    let id = span.id().expect("enabled").into_u64();
                    shard(id) as *const Shard as usize
                })
                .collect();
            assert_eq!(parts.len(), 1, "{} parts", parts.len());
        });
        // Ids that differ in their generation only: one part.
        let id = (7u64 << 38) | 42;
        for generation in 0..(1u64 << 13) {
            let other = id | (generation << 51);
            assert!(std::ptr::eq(shard(other), shard(id)));
        }
    }

    /// A part's places never shrink: a burst of open spans leaves its table's capacity behind
    /// for as long as the process lives (docs/spans.md: "the table holds the open spans only").
    #[test]
    fn a_part_shrinks_after_a_burst() {
        with_layer(|_| {
            let span = tracing::info_span!("t");
            let meta = span.metadata().expect("enabled");
            let mut table = Table::new();
            for id in 1..=100_000u64 {
                table.insert(1, id, spare(meta, None));
            }
            for id in 1..=100_000u64 {
                put_away(table.remove(1, id).expect("kept"));
            }
            let bytes = table.places.capacity() * std::mem::size_of::<Place>();
            assert!(
                table.places.len() <= 1024,
                "empty again, but {} places ({} KiB) kept",
                table.places.len(),
                bytes / 1024
            );
        });
    }

    /// The same through the layer: 200k spans open at once, then all closed.
    #[test]
    fn the_live_table_shrinks_after_a_burst_of_open_spans() {
        let layer = tracing_layer();
        let subscriber = tracing_subscriber::registry().with(layer);
        let dispatch = tracing::Dispatch::new(subscriber);
        let places = || -> usize { LIVE.iter().map(|p| lock(p).places.len()).sum() };
        let before = places();
        tracing::dispatcher::with_default(&dispatch, || {
            let open: Vec<_> = (0..200_000)
                .map(|i| tracing::info_span!("burst", i))
                .collect();
            drop(open);
        });
        let after = places();
        let kib = (after - before) * std::mem::size_of::<Place>() / 1024;
        // Keep the layer alive (its Drop would rebuild the parts).
        assert!(
            after - before <= 64 * 1024,
            "no span open, yet {} more places ({kib} KiB) than before the burst",
            after - before
        );
        drop(dispatch);
    }

    struct PanicsInDebug;
    impl std::fmt::Debug for PanicsInDebug {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            panic!("a service's Debug panics");
        }
    }

    /// A field whose Debug panics (at creation and in `record`): no part's lock poisoned, no
    /// spare lost for good, later spans kept as before.
    #[test]
    fn a_panicking_debug_poisons_nothing() {
        with_layer(|instance| {
            let r = std::panic::catch_unwind(|| {
                let _s = tracing::info_span!("boom", v = ?PanicsInDebug);
            });
            assert!(r.is_err());
            let ok = tracing::info_span!("ok", a = 1, b = tracing::field::Empty);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ok.record("b", tracing::field::debug(PanicsInDebug));
            }));
            assert!(r.is_err());
            assert!(LIVE.iter().all(|p| !p.is_poisoned()), "a part is poisoned");
            let c = chain_of(instance, &ok);
            assert_eq!(c[0].fields["a"], "1");
            assert!(!c[0].fields.contains_key("b"));
            ok.record("b", 2);
            assert_eq!(chain_of(instance, &ok)[0].fields["b"], "2");
        });
    }

    /// A Debug that creates, records on and closes spans (many: some land on the same part as
    /// the span being made), at creation and on `record`: no deadlock, both kept.
    #[test]
    fn a_reentrant_debug_does_not_deadlock() {
        struct MakesSpans(usize);
        impl std::fmt::Debug for MakesSpans {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                for i in 0..self.0 {
                    let s = tracing::info_span!("inner", i, x = tracing::field::Empty);
                    s.record("x", tracing::field::debug(format!("{i}")));
                    let _g = s.enter();
                }
                f.write_str("made")
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            with_layer(|instance| {
                let held: Vec<_> = (0..500).map(|i| tracing::info_span!("held", i)).collect();
                let outer =
                    tracing::info_span!("outer", v = ?MakesSpans(200), w = tracing::field::Empty);
                outer.record("w", tracing::field::debug(MakesSpans(200)));
                let c = chain_of(instance, &outer);
                assert_eq!(c[0].fields["v"], "made");
                assert_eq!(c[0].fields["w"], "made");
                drop(held);
            });
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(120))
            .expect("deadlock: re-entrant Debug did not finish");
    }

    /// A Debug writing 1 MB (one write, and many small ones): kept cut, at most 128 bytes and
    /// the mark.
    #[test]
    fn a_megabyte_debug_is_cut() {
        struct OneWrite;
        impl std::fmt::Debug for OneWrite {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&"é".repeat(512 * 1024))
            }
        }
        struct ManyWrites;
        impl std::fmt::Debug for ManyWrites {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                for _ in 0..(1 << 20) {
                    // Ignores the cut.
                    let _ = f.write_str("😀");
                }
                Ok(())
            }
        }
        with_layer(|instance| {
            let s = tracing::info_span!("big", a = ?OneWrite, b = ?ManyWrites, c = "tail");
            let c = chain_of(instance, &s);
            let f = &c[0].fields;
            assert_eq!(f["a"], format!("{}…", "é".repeat(64)));
            assert_eq!(f["b"], format!("{}…", "😀".repeat(32)));
            assert_eq!(f["c"], "tail");
        });
    }

    /// Every cut is the longest whole-character prefix of at most 128 bytes, for `&str` values
    /// (kept as they are up to 128 bytes) and Debug values (quoted, escaped) of every length
    /// around the cut, mixing 1- to 4-byte characters and escapes.
    #[test]
    fn cuts_at_every_length_and_width_are_whole_characters() {
        fn expected(full: &str) -> String {
            if full.len() <= MAX_VALUE_BYTES {
                return full.to_owned();
            }
            let mut end = MAX_VALUE_BYTES;
            while !full.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}…", &full[..end])
        }
        with_layer(|instance| {
            let pieces = ["a", "é", "€", "😀", "\u{1b}[31m", "\n", "\u{202e}", "\u{0}"];
            for (pi, p) in pieces.iter().enumerate() {
                for pad in 0..4 {
                    for reps in 20..140 {
                        let v: String = "x".repeat(pad) + &p.repeat(reps);
                        if v.len() > 700 {
                            continue;
                        }
                        let dbg = format!("{v:?}");
                        let s = tracing::info_span!("cut", s = v.as_str(), d = ?v, n = pi);
                        let c = chain_of(instance, &s);
                        let f = &c[0].fields;
                        assert_eq!(f["s"], expected(&v), "str {p:?} x{reps} pad {pad}");
                        assert_eq!(f["d"], expected(&dbg), "debug {p:?} x{reps} pad {pad}");
                    }
                }
            }
        });
    }

    /// Exactly 16 fields all kept; 17: the 17th left out; then record of a new name is left
    /// out and of a kept name replaces it; a recorded long value moves the text to the heap.
    #[test]
    fn sixteen_and_seventeen_fields_and_record_merges() {
        with_layer(|instance| {
            let s16 = tracing::info_span!(
                "s16",
                f0 = 0,
                f1 = 1,
                f2 = 2,
                f3 = 3,
                f4 = 4,
                f5 = 5,
                f6 = 6,
                f7 = 7,
                f8 = 8,
                f9 = 9,
                f10 = 10,
                f11 = 11,
                f12 = 12,
                f13 = 13,
                f14 = 14,
                f15 = 15
            );
            let f = &chain_of(instance, &s16)[0].fields;
            assert_eq!(f.len(), 16);
            assert_eq!(f["f15"], "15");
            let s17 = tracing::info_span!(
                "s17",
                f0 = 0,
                f1 = 1,
                f2 = 2,
                f3 = 3,
                f4 = 4,
                f5 = 5,
                f6 = 6,
                f7 = 7,
                f8 = 8,
                f9 = 9,
                f10 = 10,
                f11 = 11,
                f12 = 12,
                f13 = 13,
                f14 = 14,
                f15 = 15,
                f16 = 16
            );
            let f = &chain_of(instance, &s17)[0].fields;
            assert_eq!(f.len(), 16);
            assert!(!f.contains_key("f16"));
            // Recording on a full span: a kept name replaced by a long value (heap), others kept.
            let long = "L".repeat(200);
            s17.record("f0", long.as_str());
            s17.record("f16", "late");
            let f = &chain_of(instance, &s17)[0].fields;
            assert_eq!(f.len(), 16);
            assert_eq!(f["f0"], format!("{}…", "L".repeat(128)));
            assert_eq!(f["f15"], "15");
            assert!(!f.contains_key("f16"));
            // Max size: 16 values of 131 bytes each, then merged again.
            let v = "€".repeat(60);
            let big = tracing::info_span!(
                "big", f0 = %v, f1 = %v, f2 = %v, f3 = %v, f4 = %v, f5 = %v, f6 = %v, f7 = %v,
                f8 = %v, f9 = %v, f10 = %v, f11 = %v, f12 = %v, f13 = %v, f14 = %v, f15 = %v
            );
            big.record("f7", "short");
            let f = &chain_of(instance, &big)[0].fields;
            assert_eq!(f.len(), 16);
            assert_eq!(f["f7"], "short");
            assert_eq!(f["f15"], format!("{}…", "€".repeat(42)));
        });
    }

    /// Per-layer filter: a contextual span whose current (entered) span the filter leaves out
    /// has the next kept ancestor as parent; so does one with an explicit filtered-out parent.
    #[test]
    fn a_filtered_out_current_span_is_skipped_for_a_contextual_child() {
        use tracing_subscriber::filter::LevelFilter;
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink))
            .with(layer.with_filter(LevelFilter::INFO));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("connection");
            let _g1 = outer.enter();
            let hidden = tracing::debug_span!("excluded");
            let _g2 = hidden.enter();
            let inner = tracing::info_span!("request");
            assert_eq!(
                names(&chain_of(instance, &inner)),
                ["connection", "request"]
            );
            let _g3 = inner.enter();
            let hidden2 = tracing::trace_span!("excluded2");
            let _g4 = hidden2.enter();
            let leaf = tracing::info_span!("leaf");
            assert_eq!(
                names(&chain_of(instance, &leaf)),
                ["connection", "request", "leaf"]
            );
        });
    }

    /// Spans created on one thread and entered on another; a span of another subscriber
    /// current; spans created before the layer was added (reload).
    #[test]
    fn parents_across_threads_subscribers_and_reload() {
        let layer = tracing_layer();
        let instance = layer.instance;
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(layer));
        let (root, child) = tracing::dispatcher::with_default(&dispatch, || {
            let root = tracing::info_span!("root");
            let child = root.in_scope(|| tracing::info_span!("child"));
            (root, child)
        });
        let d2 = dispatch.clone();
        let grandchild = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&d2, || {
                let _g = child.enter();
                tracing::info_span!("grandchild")
            })
        })
        .join()
        .unwrap();
        assert_eq!(
            names(&chain_of(instance, &grandchild)),
            ["root", "child", "grandchild"]
        );
        drop(root);

        // Another subscriber's span current: a contextual span of ours is a root.
        let other = tracing::Dispatch::new(tracing_subscriber::registry().with(tracing_layer()));
        let mine = tracing::dispatcher::with_default(&other, || {
            let theirs = tracing::info_span!("theirs");
            let _g = theirs.enter();
            tracing::dispatcher::with_default(&dispatch, || tracing::info_span!("mine"))
        });
        assert_eq!(names(&chain_of(instance, &mine)), ["mine"]);

        // reload: a span created before the layer was there is no parent of ours.
        use tracing_subscriber::reload;
        let (rl, handle) = reload::Layer::new(None::<SpanLayer>);
        let d3 = tracing::Dispatch::new(tracing_subscriber::registry().with(rl));
        tracing::dispatcher::with_default(&d3, || {
            let early = tracing::info_span!("early");
            let _g = early.enter();
            let late_layer = tracing_layer();
            let li = late_layer.instance;
            handle.reload(Some(late_layer)).unwrap();
            let late = tracing::info_span!("late");
            assert_eq!(names(&chain_of(li, &late)), ["late"]);
            let _g2 = late.enter();
            let later = tracing::info_span!("later");
            assert_eq!(names(&chain_of(li, &later)), ["late", "later"]);
        });
    }
}

/// Review: a `LookupSpan` subscriber that does not implement `current_span` (the trait's
/// default: `Current::unknown()`), wrapping a registry that does track parents.
#[cfg(test)]
mod review_unknown_current {
    use super::*;
    use tracing::span;
    use tracing::{Event, Metadata};
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::registry::{Registry, SpanData};

    struct NoCurrent(Registry);

    impl Subscriber for NoCurrent {
        fn register_callsite(
            &self,
            m: &'static Metadata<'static>,
        ) -> tracing::subscriber::Interest {
            self.0.register_callsite(m)
        }
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            self.0.enabled(m)
        }
        fn new_span(&self, a: &span::Attributes<'_>) -> span::Id {
            self.0.new_span(a)
        }
        fn record(&self, s: &span::Id, v: &span::Record<'_>) {
            self.0.record(s, v)
        }
        fn record_follows_from(&self, s: &span::Id, f: &span::Id) {
            self.0.record_follows_from(s, f)
        }
        fn event(&self, e: &Event<'_>) {
            self.0.event(e)
        }
        fn enter(&self, s: &span::Id) {
            self.0.enter(s)
        }
        fn exit(&self, s: &span::Id) {
            self.0.exit(s)
        }
        fn clone_span(&self, s: &span::Id) -> span::Id {
            self.0.clone_span(s)
        }
        fn try_close(&self, s: span::Id) -> bool {
            self.0.try_close(s)
        }
        // `current_span` left to the trait's default: unknown.
    }

    impl<'a> LookupSpan<'a> for NoCurrent {
        type Data = <Registry as LookupSpan<'a>>::Data;
        fn span_data(&'a self, id: &Id) -> Option<Self::Data> {
            self.0.span_data(id)
        }
    }

    /// The registry knows the parent (`ctx.span(id).parent()`, what the layer used before);
    /// the layer asks `current_span`, gets "unknown", and keeps the span as a root.
    #[test]
    fn a_contextual_parent_is_kept_when_current_span_is_unknown() {
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = NoCurrent(Registry::default()).with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer");
            let _g = outer.enter();
            let inner = tracing::info_span!("inner");
            let registry_parent = tracing::dispatcher::get_default(|d| {
                let r = d.downcast_ref::<NoCurrent>().expect("the wrapped registry");
                r.span_data(inner.id().as_ref().unwrap())
                    .and_then(|d| d.parent().cloned())
            });
            assert_eq!(registry_parent, outer.id(), "the registry has the parent");
            let chain = walk_entered(crate::poll::span_stack::Entered {
                layer: instance,
                id: inner.id().unwrap().into_u64(),
            })
            .spans;
            let names: Vec<_> = chain.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, ["outer", "inner"]);
        });
    }
}
