//! `tracing` spans on pinned events: [`tracing_layer()`], the layer a service adds to its
//! subscriber so that each pin says which request (which span, which trace) it happened in.
//!
//! Two sides, as in console-subscriber:
//! - `poll/spans.rs`: what `on_enter`/`on_exit` do (they run inside polls): push or pop the span's id on
//!   a fixed stack in the calling thread's slot. No allocation, lock or system call; a thread
//!   with no slot (not a watched worker) does nothing.
//! - here: `on_new_span`/`on_record`/`on_close` (once per span, not per poll) keep each live
//!   span's name, target and fields (bounded) in a map behind a lock, where the watchdog looks
//!   up the innermost span entered during the poll it flags, and that span's parents.
//!
//! Which spans a pin shows: the innermost span *entered during the pinned poll* on the pinned
//! thread, and its parents (the span tree, outermost first). A span entered before the poll began
//! (a `block_on` caller's `span.enter()`, a span left entered by an earlier poll) is not one of
//! the poll's own: a pin whose poll entered no span has none, even if such a span is entered —
//! though it shows as a parent of a span created inside it. A span entered on another thread
//! never shows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::dispatcher::{Dispatch, WeakDispatch};
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

/// What pinwatch keeps of a span, in the registry's storage for it (its extensions): the
/// fields as text, without a map or an allocation per field. The name, target and parent are
/// the registry's.
struct Kept {
    /// Each field's name and where its value ends in `text`, in recording order.
    names: [&'static str; MAX_FIELDS],
    ends: [u16; MAX_FIELDS],
    n: usize,
    text: Text,
    #[cfg(feature = "otel-trace")]
    trace_id: Option<String>,
    #[cfg(feature = "otel-trace")]
    span_id: Option<String>,
}

impl Kept {
    fn new() -> Kept {
        Kept {
            names: [""; MAX_FIELDS],
            ends: [0; MAX_FIELDS],
            n: 0,
            text: Text::default(),
            #[cfg(feature = "otel-trace")]
            trace_id: None,
            #[cfg(feature = "otel-trace")]
            span_id: None,
        }
    }

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

    /// Appends a field's value, formatted and cut at [`MAX_VALUE_BYTES`].
    fn put(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        self.push(field, |text| {
            let start = text.len();
            let mut w = Capped {
                text,
                limit: start + MAX_VALUE_BYTES + 4,
            };
            // A value longer than kept stops being formatted there (`Capped` returns an
            // error): an `#[instrument]`ed request body is not formatted whole, inside a poll,
            // to be cut.
            let _ = std::fmt::Write::write_fmt(&mut w, value);
            if text.len() - start > MAX_VALUE_BYTES {
                let mut cut = start + MAX_VALUE_BYTES;
                while !text.as_str().is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("…");
            }
        });
    }

    /// Appends a field whose value `write` puts in the text (at most [`MAX_FIELDS`] fields: a
    /// new name past that is left out).
    #[inline]
    fn push(&mut self, field: &Field, write: impl FnOnce(&mut Text)) {
        if self.n >= MAX_FIELDS {
            return;
        }
        let start = self.text.len();
        write(&mut self.text);
        let Ok(end) = u16::try_from(self.text.len()) else {
            self.text.truncate(start);
            return;
        };
        self.names[self.n] = field.name();
        self.ends[self.n] = end;
        self.n += 1;
    }

    /// The fields of `newer` (an `on_record`) merged in: a value recorded again replaces the
    /// old one; new names are kept while there is room.
    fn merge(&mut self, newer: &Kept) {
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
            self.text.push_str(&v);
            let Ok(end) = u16::try_from(self.text.len()) else {
                break;
            };
            self.names[self.n] = k;
            self.ends[self.n] = end;
            self.n += 1;
        }
    }
}

/// Text kept in place up to [`INLINE_TEXT`] bytes, then all of it on the heap. Only whole
/// characters are pushed, so it is always UTF-8.
struct Text {
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
    fn len(&self) -> usize {
        match &self.heap {
            Some(h) => h.len(),
            None => self.len,
        }
    }

    fn as_str(&self) -> &str {
        match &self.heap {
            Some(h) => h,
            None => std::str::from_utf8(&self.inline[..self.len]).unwrap_or(""),
        }
    }

    #[inline]
    fn push_str(&mut self, s: &str) {
        if self.heap.is_none() {
            if let Some(room) = self.inline.get_mut(self.len..self.len + s.len()) {
                room.copy_from_slice(s.as_bytes());
                self.len += s.len();
                return;
            }
            let mut heap = String::with_capacity(2 * (self.len + s.len()));
            heap.push_str(std::str::from_utf8(&self.inline[..self.len]).unwrap_or(""));
            self.heap = Some(heap);
        }
        if let Some(h) = &mut self.heap {
            h.push_str(s);
        }
    }

    fn truncate(&mut self, len: usize) {
        match &mut self.heap {
            Some(h) => h.truncate(len),
            None => self.len = self.len.min(len),
        }
    }
}

/// Writes into a span's text up to `limit` bytes (a little more than [`MAX_VALUE_BYTES`] of a
/// value: enough to tell it was longer), then fails the write, which stops the formatting.
struct Capped<'a> {
    text: &'a mut Text,
    limit: usize,
}

impl std::fmt::Write for Capped<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.limit.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(&s[..end]);
        Err(std::fmt::Error)
    }
}

impl Visit for Kept {
    fn record_str(&mut self, field: &Field, value: &str) {
        if value.len() <= MAX_VALUE_BYTES {
            // As it is: no formatting.
            self.push(field, |text| text.push_str(value));
        } else {
            self.put(field, format_args!("{value}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format_args!("{value:?}"));
    }
}

/// How the watchdog reads the spans of one layer instance: the subscriber the layer is part
/// of, and a walk that knows the subscriber's type.
struct Registered {
    instance: u64,
    /// The subscriber, when `tracing` said which (`on_register_dispatch`: not through an
    /// `Option` or a `Vec` of layers); else the global default subscriber is read.
    dispatch: Option<WeakDispatch>,
    walk: fn(&Dispatch, u64) -> Captured,
}

/// The layer instances registered with a subscriber. Locked when a subscriber is made and
/// when the watchdog reads a pin's spans — never on a span's creation, entry, exit or close.
static LAYERS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

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
/// [`MAX_VALUE_BYTES`]) into the registry's storage for that span — no lock shared with other
/// spans or threads (docs/overhead.md gives the instructions). A pinned event carries at most
/// [`MAX_SPANS`] spans.
pub fn tracing_layer() -> SpanLayer {
    SpanLayer {
        instance: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
        registered: AtomicBool::new(false),
        #[cfg(feature = "otel-trace")]
        dispatch: std::sync::OnceLock::new(),
    }
}

/// The layer [`tracing_layer()`] returns.
#[derive(Debug)]
pub struct SpanLayer {
    instance: u64,
    /// Whether the watchdog knows how to read this layer's spans (see [`register`]).
    registered: AtomicBool,
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

impl<S> tracing_subscriber::Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        #[cfg(feature = "otel-trace")]
        let _ = self.dispatch.set(subscriber.downgrade());
        register(self.instance, Some(subscriber), walk::<S>);
        self.registered.store(true, Ordering::Relaxed);
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !self.registered.load(Ordering::Relaxed) {
            // Not told which subscriber it is in (a layer inside an `Option` or a `Vec`, or
            // tracing-subscriber before 0.3.21): the watchdog reads the global default one.
            // Once per layer.
            register(self.instance, None, walk::<S>);
            self.registered.store(true, Ordering::Relaxed);
        }
        let Some(span) = ctx.span(id) else { return };
        {
            let mut ext = span.extensions_mut();
            // `replace`, not `insert` (which panics on a second value): a subscriber may hold
            // two of these layers. Filled in place: the span is not moved once formatted.
            ext.replace(Kept::new());
            if let Some(kept) = ext.get_mut::<Kept>() {
                attrs.record(kept);
            }
        }
        #[cfg(feature = "otel-trace")]
        {
            // Asked with the span's storage unlocked: the OpenTelemetry layer locks it too.
            let ids = self.otel_ids(id);
            let mut ext = span.extensions_mut();
            if let Some(kept) = ext.get_mut::<Kept>() {
                (kept.trace_id, kept.span_id) = ids;
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        // Formatted before the span's storage is locked: a value's `Debug` is the service's
        // code, and may do anything with spans.
        let mut recorded = Kept::new();
        values.record(&mut recorded);
        if recorded.n == 0 {
            return;
        }
        if let Some(span) = ctx.span(id) {
            if let Some(k) = span.extensions_mut().get_mut::<Kept>() {
                k.merge(&recorded);
            }
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
}

/// Remembers layer `instance` of `subscriber` (`None`: the global default one), read by
/// `walk`; forgets the layers whose subscriber is gone.
fn register(instance: u64, subscriber: Option<&Dispatch>, walk: fn(&Dispatch, u64) -> Captured) {
    let mut layers = LAYERS.lock().unwrap_or_else(|p| p.into_inner());
    layers.retain(|l| {
        l.instance != instance && l.dispatch.as_ref().is_none_or(|d| d.upgrade().is_some())
    });
    layers.push(Registered {
        instance,
        dispatch: subscriber.map(Dispatch::downgrade),
        walk,
    });
}

/// The chain of span `id` in subscriber `dispatch`, whose registry is an `S` (the innermost span
/// first): the spans still open, each with what [`Kept`] holds of it.
fn walk<S>(dispatch: &Dispatch, id: u64) -> Captured
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let mut out = Captured::default();
    let Some(registry) = dispatch.downcast_ref::<S>() else {
        return out;
    };
    let Some(id) = std::num::NonZeroU64::new(id) else {
        return out;
    };
    let mut next = registry.span(&Id::from_non_zero_u64(id));
    // Bounded also in steps: a parent link is the registry's, but a chain of runtime spans is
    // walked through.
    let mut steps = 0;
    while let Some(span) = next {
        steps += 1;
        if out.spans.len() >= MAX_SPANS || steps > 4 * MAX_SPANS {
            break;
        }
        let meta = span.metadata();
        let ext = span.extensions();
        let kept = ext.get::<Kept>();
        let info = SpanInfo {
            name: meta.name().to_owned(),
            target: meta.target().to_owned(),
            fields: kept.map(Kept::to_map).unwrap_or_default(),
        };
        #[cfg(feature = "otel-trace")]
        if out.trace_id.is_none() {
            if let Some(k) = kept.filter(|k| k.trace_id.is_some()) {
                out.trace_id.clone_from(&k.trace_id);
                out.span_id.clone_from(&k.span_id);
            }
        }
        drop(ext);
        next = span.parent();
        if is_runtimes(&info) {
            // tokio's own instrumentation (its `tracing` feature: the task span it enters
            // around every poll, resources): not the service's request. Walked through, so
            // that the spans a task was spawned in still show.
            continue;
        }
        out.spans.push(info);
    }
    out.spans.reverse();
    out
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

/// The spans poll `poll` of `slot` is in: the innermost entered during that poll and its parents,
/// outermost first. Watchdog side.
/// A span of tokio's own instrumentation (`runtime.spawn`, `runtime.resource`, …: targets
/// `tokio::…` and `runtime::…`).
fn is_runtimes(info: &SpanInfo) -> bool {
    info.name.starts_with("runtime.")
        || info.target.starts_with("tokio::")
        || info.target.starts_with("runtime::")
}

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
    let found = {
        let layers = LAYERS.lock().unwrap_or_else(|p| p.into_inner());
        layers
            .iter()
            .find(|l| l.instance == e.layer)
            .map(|l| (l.dispatch.as_ref().map(WeakDispatch::upgrade), l.walk))
    };
    // The subscriber is kept alive by the upgrade while its spans are read, outside the lock.
    match found {
        Some((Some(Some(dispatch)), walk)) => walk(&dispatch, e.id),
        Some((Some(None), _)) | None => Captured::default(),
        // This thread has no subscriber of its own: the default is the global one.
        Some((None, walk)) => tracing::dispatcher::get_default(|d| walk(d, e.id)),
    }
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
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
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

    /// A closed span is gone from the chain: nothing of it is kept.
    #[test]
    fn a_closed_span_is_not_found() {
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
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
        let layer = tracing_layer();
        let instance = layer.instance;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
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
