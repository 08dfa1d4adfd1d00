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

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

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

/// What pinwatch keeps of a live span.
struct Kept {
    info: SpanInfo,
    parent: Option<u64>,
    trace_id: Option<String>,
    span_id: Option<String>,
}

/// Live spans, by (layer instance, span id).
static LIVE: LazyLock<Mutex<HashMap<(u64, u64), Kept>>> = LazyLock::new(Default::default);

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
/// system call); creating a span takes a lock and copies its fields (at most [`MAX_FIELDS`], each
/// cut at [`MAX_VALUE_BYTES`]). A pinned event carries at most [`MAX_SPANS`] spans.
pub fn tracing_layer() -> SpanLayer {
    SpanLayer {
        instance: NEXT_LAYER.fetch_add(1, Ordering::Relaxed),
        #[cfg(feature = "otel-trace")]
        dispatch: std::sync::OnceLock::new(),
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

/// Reads a span's fields into a bounded map.
struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        if self.0.len() >= MAX_FIELDS && !self.0.contains_key(field.name()) {
            return;
        }
        let mut w = Capped(String::new());
        // A value longer than kept stops being formatted there (`Capped` returns an error):
        // an `#[instrument]`ed request body is not formatted whole, inside a poll, to be cut.
        let _ = w.write_fmt(value);
        let mut v = w.0;
        if v.len() > MAX_VALUE_BYTES {
            let mut cut = MAX_VALUE_BYTES;
            while !v.is_char_boundary(cut) {
                cut -= 1;
            }
            v.truncate(cut);
            v.push('…');
        }
        self.0.insert(field.name().to_owned(), v);
    }
}

/// A `String` that takes a little more than [`MAX_VALUE_BYTES`] (enough to tell a value was
/// longer), then fails the write, which stops the formatting.
struct Capped(String);

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = (MAX_VALUE_BYTES + 4).saturating_sub(self.0.len());
        if s.len() <= room {
            self.0.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.0.push_str(&s[..end]);
        Err(std::fmt::Error)
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format_args!("{value:?}"));
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
        let meta = attrs.metadata();
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let span = ctx.span(id);
        let parent = span
            .as_ref()
            .and_then(|s| s.parent())
            .map(|p| p.id().into_u64());
        let _ = span;
        #[cfg(feature = "otel-trace")]
        let (trace_id, span_id) = self.otel_ids(id);
        #[cfg(not(feature = "otel-trace"))]
        let (trace_id, span_id) = (None, None);
        let kept = Kept {
            info: SpanInfo {
                name: meta.name().to_owned(),
                target: meta.target().to_owned(),
                fields,
            },
            parent,
            trace_id,
            span_id,
        };
        if let Ok(mut live) = LIVE.lock() {
            live.insert((self.instance, id.into_u64()), kept);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        // Formatted before the map is locked: a value's `Debug` is the service's code, and may
        // make a span itself (whose `on_new_span` takes the lock: a deadlock if held here).
        let mut recorded = BTreeMap::new();
        values.record(&mut Fields(&mut recorded));
        if let Ok(mut live) = LIVE.lock() {
            if let Some(k) = live.get_mut(&(self.instance, id.into_u64())) {
                let fields = &mut k.info.fields;
                for (name, value) in recorded {
                    if fields.len() < MAX_FIELDS || fields.contains_key(&name) {
                        fields.insert(name, value);
                    }
                }
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

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        if let Ok(mut live) = LIVE.lock() {
            live.remove(&(self.instance, id.into_u64()));
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
        Some(e) => walk(e),
        None => Captured::default(),
    }
}

/// The chain of span `id` of layer instance `layer` (the innermost one a poll entered):
/// outermost first, those still open.
#[cfg_attr(not(feature = "schedule-latency"), allow(dead_code))]
pub(crate) fn chain(layer: u64, id: u64) -> Vec<SpanInfo> {
    walk(crate::poll::span_stack::Entered { layer, id }).spans
}

fn walk(e: crate::poll::span_stack::Entered) -> Captured {
    let mut out = Captured::default();
    let Ok(live) = LIVE.lock() else { return out };
    let mut next = Some(e.id);
    // Bounded also in steps: span ids are reused once closed, so a stale parent link could in
    // principle lead back into the chain.
    let mut steps = 0;
    while let Some(id) = next {
        steps += 1;
        if out.spans.len() >= MAX_SPANS || steps > 4 * MAX_SPANS {
            break;
        }
        let Some(k) = live.get(&(e.layer, id)) else {
            break;
        };
        next = k.parent;
        if is_runtimes(&k.info) {
            // tokio's own instrumentation (its `tracing` feature: the task span it enters
            // around every poll, resources): not the service's request. Walked through, so
            // that the spans a task was spawned in still show.
            continue;
        }
        if out.trace_id.is_none() && k.trace_id.is_some() {
            out.trace_id.clone_from(&k.trace_id);
            out.span_id.clone_from(&k.span_id);
        }
        out.spans.push(k.info.clone());
    }
    drop(live);
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
            let live = LIVE.lock().unwrap();
            let kept = &live[&(instance, id.into_u64())].info.fields["body"];
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
