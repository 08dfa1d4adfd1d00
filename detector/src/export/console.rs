//! tokio-console: one console resource per worker, showing live who pins it.
//!
//! console-subscriber takes resources from any crate: a span named `runtime.resource` with the
//! string fields `concrete_type` and `kind` (and `loc.file`, `loc.line`, `loc.col`) is a
//! resource; an event with target `runtime::resource::state_update`, emitted while that span is
//! entered, sets one attribute of it (one field per event; numbers carry `.op` = `override` and
//! `.unit`). An attribute keeps the type it was first given, so every attribute is set once at
//! creation and then only overridden.
//!
//! Everything runs on a thread of pinwatch's own (`pinwatch-sink-console`): the export thread hands
//! it each event through a bounded queue (`try_send`: never waits), and it reads the watchdog's
//! live pins every [`TICK`] to keep `pinned_for` current. Nothing here touches the per-poll path.
//!
//! The spans are made against the process's global `tracing` dispatcher. A service that installs
//! its subscriber after pinwatch starts (the body of `#[pinwatch::main]` runs after the runtime
//! is built) still gets them: while they are disabled, the thread makes them again every tick.

use std::collections::HashMap;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Exporter, Outlet, Parts, Started};
use crate::event::{PinnedEvent, State};
use crate::watch::Shared;
use crate::Error;

/// The resources' `kind`, as the console shows it.
pub const KIND: &str = "pinwatch.worker";

/// The resources' `concrete_type`.
pub const CONCRETE_TYPE: &str = "pinwatch::Worker";

/// How often a pinned worker's `pinned_for` is brought up to date.
pub const TICK: Duration = Duration::from_millis(250);

/// What a worker's resource shows: the attributes, in the order they are first set.
#[derive(Clone, Debug, PartialEq)]
struct View {
    pinned: bool,
    pinned_for_ms: u64,
    /// tokio's id of the task holding the worker; 0 when none.
    task_id: u64,
    reason: String,
    blocking_op: String,
    /// What usually fixes it (the event's `advice`).
    advice: String,
    /// `file:line function`, the file relative to the working directory when it is under it
    /// (the console's table cuts long attributes: the place first).
    top_frame: String,
    /// Pins of this worker so far (retracted ones taken back).
    pins: u64,
    /// Time this worker spent pinned, over the pins that ended.
    pinned_total_ms: u64,
    /// The pin shown has stalled the whole runtime (`runtime_stalled`).
    runtime_stalled: bool,
    /// What it did to the whole runtime: how long nobody drove its timers and I/O, who took
    /// them over (`PinnedEvent::stall_description`); `-` when it stalled nothing.
    stall: String,
    /// Which request: the innermost `tracing` span of the pinned poll with its fields
    /// (`request{method=GET uri=/report}`, bounded); `-` outside any span.
    span: String,
    /// Who waited behind this worker's last completed pin ([`victims_text`]); kept while the
    /// worker is idle or pinned again, until the next pin completes.
    victims: String,
}

/// Shown for a text attribute of a worker that is not pinned.
const NONE: &str = "-";

impl View {
    fn idle(pins: u64, pinned_total_ms: u64, victims: String) -> View {
        View {
            pinned: false,
            pinned_for_ms: 0,
            task_id: 0,
            reason: NONE.to_owned(),
            blocking_op: NONE.to_owned(),
            advice: NONE.to_owned(),
            top_frame: NONE.to_owned(),
            pins,
            pinned_total_ms,
            runtime_stalled: false,
            stall: NONE.to_owned(),
            span: NONE.to_owned(),
            victims,
        }
    }
}

/// A completed pin's victims, short enough for the console's table: `11 delayed, max 300.0 ms`
/// (tokio measured the waits: the `schedule-latency` feature), `none delayed`, `not measured`
/// (the tasks polled after the pin are known, their waits are not), or `-` (the event has no
/// victims).
fn victims_text(v: Option<&crate::event::Victims>) -> String {
    match v {
        None => NONE.to_owned(),
        Some(v) if !v.measured => "not measured".to_owned(),
        Some(v) if v.tasks == 0 => "none delayed".to_owned(),
        Some(v) => match v.max_wait {
            Some(max) => format!("{} delayed, max {:.1} ms", v.tasks, max.as_secs_f64() * 1e3),
            None => format!("{} delayed", v.tasks),
        },
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One worker's resource and what it shows.
struct WorkerResource {
    index: usize,
    span: tracing::Span,
    view: View,
    /// The pin shown, with when its last event came.
    current: Option<(u64, Instant)>,
    /// Pins counted in `pins` whose end has not come yet.
    open: std::collections::HashSet<u64>,
    cwd: Option<std::path::PathBuf>,
}

/// A frame as `file:line function`, the file relative to `cwd` when it is under it.
fn frame_text(f: &crate::event::Frame, cwd: &Option<std::path::PathBuf>) -> String {
    let function = f.function.as_deref().unwrap_or("<unknown>");
    let Some(file) = &f.file else {
        return function.to_owned();
    };
    let path = std::path::Path::new(file);
    let file = cwd
        .as_deref()
        .and_then(|c| path.strip_prefix(c).ok())
        .unwrap_or(path)
        .display();
    match f.line {
        Some(line) => format!("{file}:{line} {function}"),
        None => format!("{file} {function}"),
    }
}

impl WorkerResource {
    fn new(index: usize, at: &'static Location<'static>) -> WorkerResource {
        let mut r = WorkerResource {
            index,
            span: tracing::Span::none(),
            view: View::idle(0, 0, NONE.to_owned()),
            current: None,
            open: std::collections::HashSet::new(),
            cwd: std::env::current_dir().ok(),
        };
        r.make_span(at);
        r
    }

    /// (Re)makes the span, and sets every attribute on it.
    fn make_span(&mut self, at: &'static Location<'static>) {
        self.span = tracing::trace_span!(
            parent: None,
            "runtime.resource",
            concrete_type = CONCRETE_TYPE,
            kind = KIND,
            loc.file = at.file(),
            loc.line = at.line(),
            loc.col = at.column(),
            is_internal = false,
            inherits_child_attrs = false,
            worker = self.index,
        );
        let view = self.view.clone();
        self.emit(&view, None);
    }

    /// Sets what differs between `old` (all of it when `None`) and `new`.
    fn emit(&self, new: &View, old: Option<&View>) {
        if self.span.is_disabled() {
            return;
        }
        let _in = self.span.enter();
        macro_rules! update {
            ($($field:tt)+) => {
                tracing::trace!(target: "runtime::resource::state_update", $($field)+)
            };
        }
        if old.is_none_or(|o| o.pinned != new.pinned) {
            update!(pinned = new.pinned);
        }
        if old.is_none_or(|o| o.pinned_for_ms != new.pinned_for_ms) {
            update!(
                pinned_for = new.pinned_for_ms,
                pinned_for.unit = "ms",
                pinned_for.op = "override"
            );
        }
        if old.is_none_or(|o| o.task_id != new.task_id) {
            update!(task_id = new.task_id, task_id.op = "override");
        }
        if old.is_none_or(|o| o.reason != new.reason) {
            update!(reason = new.reason.as_str());
        }
        if old.is_none_or(|o| o.blocking_op != new.blocking_op) {
            update!(blocking_op = new.blocking_op.as_str());
        }
        if old.is_none_or(|o| o.advice != new.advice) {
            update!(advice = new.advice.as_str());
        }
        if old.is_none_or(|o| o.top_frame != new.top_frame) {
            update!(top_frame = new.top_frame.as_str());
        }
        if old.is_none_or(|o| o.pins != new.pins) {
            update!(pins = new.pins, pins.op = "override");
        }
        if old.is_none_or(|o| o.pinned_total_ms != new.pinned_total_ms) {
            update!(
                pinned_total = new.pinned_total_ms,
                pinned_total.unit = "ms",
                pinned_total.op = "override"
            );
        }
        if old.is_none_or(|o| o.runtime_stalled != new.runtime_stalled) {
            update!(runtime_stalled = new.runtime_stalled);
        }
        if old.is_none_or(|o| o.stall != new.stall) {
            update!(stall = new.stall.as_str());
        }
        if old.is_none_or(|o| o.span != new.span) {
            update!(span = new.span.as_str());
        }
        if old.is_none_or(|o| o.victims != new.victims) {
            update!(victims = new.victims.as_str());
        }
    }

    fn set(&mut self, new: View) {
        if new != self.view {
            self.emit(&new, Some(&self.view));
            self.view = new;
        }
    }

    /// Applies one event of a pin of this worker.
    fn event(&mut self, e: &PinnedEvent) {
        match e.state {
            State::InProgress => {
                let pins = self.view.pins + u64::from(self.open.insert(e.id));
                let view = View {
                    pinned: true,
                    pinned_for_ms: ms(e.duration),
                    task_id: e.task_id.unwrap_or(0),
                    reason: e.reason.map_or(NONE, |r| r.as_str()).to_owned(),
                    blocking_op: e.blocking_operation.clone().unwrap_or_else(|| NONE.into()),
                    advice: e.advice.clone().unwrap_or_else(|| NONE.into()),
                    top_frame: e
                        .top_frame
                        .as_ref()
                        .map_or_else(|| NONE.to_owned(), |f| frame_text(f, &self.cwd)),
                    pins,
                    pinned_total_ms: self.view.pinned_total_ms,
                    runtime_stalled: e.runtime_stalled,
                    stall: e.stall_description().unwrap_or_else(|| NONE.into()),
                    span: e
                        .innermost_span()
                        .map_or_else(|| NONE.to_owned(), crate::SpanInfo::display),
                    // An in_progress report's victims are partial: the last completed pin's stay.
                    victims: self.view.victims.clone(),
                };
                self.current = Some((e.id, Instant::now()));
                self.set(view);
            }
            State::Completed => {
                // A pin whose in-progress reports were all dropped still counts.
                let pins = self.view.pins + u64::from(!self.open.remove(&e.id));
                let total = self.view.pinned_total_ms.saturating_add(ms(e.duration));
                let victims = victims_text(e.victims.as_ref());
                self.end(e.id, View::idle(pins, total, victims));
            }
            State::Retracted => {
                let pins = self
                    .view
                    .pins
                    .saturating_sub(u64::from(self.open.remove(&e.id)));
                let victims = self.view.victims.clone();
                self.end(e.id, View::idle(pins, self.view.pinned_total_ms, victims));
            }
        }
    }

    /// The pin `id` ended: show `idle`, unless another pin is shown by now.
    fn end(&mut self, id: u64, idle: View) {
        match self.current {
            Some((shown, _)) if shown != id => {
                // An older pin of this worker ended after a newer one began (reports crossed):
                // count it, keep showing the newer one.
                let mut v = self.view.clone();
                v.pins = idle.pins;
                v.pinned_total_ms = idle.pinned_total_ms;
                v.victims = idle.victims;
                self.set(v);
            }
            _ => {
                self.current = None;
                self.set(idle);
            }
        }
    }

    /// Brings `pinned_for` up to date from the watchdog's live pins; a pin the watchdog no
    /// longer sees, whose end never came (dropped from the queue), ends here.
    fn tick(&mut self, live: &HashMap<u64, Duration>) {
        let Some((id, last)) = self.current else {
            return;
        };
        match live.get(&id) {
            Some(age) => {
                let mut v = self.view.clone();
                v.pinned_for_ms = ms(*age);
                self.set(v);
            }
            None if last.elapsed() > 4 * TICK => {
                // Kept in `open`: if its end comes after all, it is not counted twice.
                self.current = None;
                let idle = View::idle(
                    self.view.pins,
                    self.view.pinned_total_ms,
                    self.view.victims.clone(),
                );
                self.set(idle);
            }
            None => {}
        }
    }
}

/// The console exporter, as the start-up line names it: its resources are kept on a thread of
/// their own ([`Resources`]).
struct Console {
    mode: crate::config::Console,
}

/// One resource per worker (more appear if events name higher indexes), on the console's
/// thread ([`on_own_thread`](super::on_own_thread)): made there, against the process's
/// dispatcher.
struct Resources {
    resources: Vec<WorkerResource>,
    /// The resources' location (where the runtime was built).
    at: &'static Location<'static>,
    watched: Arc<Shared>,
}

impl Resources {
    fn new(workers: usize, at: &'static Location<'static>, watched: Arc<Shared>) -> Resources {
        Resources {
            resources: (0..workers).map(|i| WorkerResource::new(i, at)).collect(),
            at,
            watched,
        }
    }
}

impl super::threaded::OwnThread for Resources {
    fn event(&mut self, e: &PinnedEvent) {
        let Some(index) = e.worker.index else {
            return;
        };
        while self.resources.len() <= index {
            let i = self.resources.len();
            self.resources.push(WorkerResource::new(i, self.at));
        }
        self.resources[index].event(e);
    }

    fn every(&self) -> Option<Duration> {
        Some(TICK)
    }

    fn tick(&mut self) {
        for r in self.resources.iter_mut().filter(|r| r.span.is_disabled()) {
            r.make_span(self.at);
        }
        if self.resources.iter().any(|r| r.current.is_some()) {
            let pinned: HashMap<u64, Duration> = self.watched.pinned_now().into_iter().collect();
            for r in self.resources.iter_mut() {
                r.tick(&pinned);
            }
        }
    }
}

impl Exporter for Console {
    fn describe(&self) -> String {
        match self.mode {
            crate::config::Console::On => {
                // The address the server was installed with (as given: port 0 is not the
                // port it took), whatever the variable says now.
                let bind = lock_installed().clone().unwrap_or_default();
                format!("tokio-console on {bind}")
            }
            _ => "console resources in the service's subscriber".to_owned(),
        }
    }
}

impl crate::Builder {
    /// Serves tokio-console and keeps one console resource per worker
    /// ([`Console::On`](crate::config::Console::On)), or only the resources, for a subscriber of
    /// yours with the console layer ([`Console::Resources`](crate::config::Console::Resources))
    /// (`PINWATCH_CONSOLE`).
    pub fn console(mut self, mode: crate::config::Console) -> Self {
        self.config.console = mode;
        self
    }
}

/// The resources (and with [`Console::On`](crate::config::Console::On), the console's server),
/// when `PINWATCH_CONSOLE` asks for them.
pub(crate) fn start(parts: &Parts) -> Result<Option<Started>, Error> {
    let config = &parts.watched.config;
    if config.console == crate::config::Console::Off {
        return Ok(None);
    }
    if config.console == crate::config::Console::On {
        install_server()?;
    }
    let (workers, at) = (parts.handle.metrics().num_workers(), parts.built_at);
    let watched = Arc::clone(&parts.watched);
    let resources = super::on_own_thread(
        "console",
        move || Resources::new(workers, at, watched),
        config.queue_capacity,
        &parts.drops,
    )?;
    Ok(Some(Started {
        sink: Outlet::Thread(resources),
        exporter: Box::new(Console {
            mode: config.console,
        }),
    }))
}

/// Installs the process's `tracing` subscriber, as `console_subscriber::init` does: the console
/// layer (its server on a thread of its own, configured by `TOKIO_CONSOLE_BIND` and the other
/// `TOKIO_CONSOLE_*` variables) and a `fmt` layer to stderr filtered by `RUST_LOG` (default:
/// `warn`, so that pinwatch's own reports show).
///
/// Once per process: the subscriber cannot be taken out again, and its server runs on for the
/// life of the process. A detector started after one that installed it (a runtime rebuilt, a
/// start retried after it failed past this point) finds it installed and uses it as it is.
fn install_server() -> Result<(), Error> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    // Taken for the whole install, so that two detectors starting at once install it once.
    let mut installed = lock_installed();
    if installed.is_some() {
        return Ok(());
    }
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) => tracing_subscriber::EnvFilter::try_new(&v).map_err(|e| {
            Error::Console(format!(
                "RUST_LOG={v:?} is not a filter ({e}); write it like `warn` or `info,my_app=debug`"
            ))
        })?,
        // Without RUST_LOG: warnings, and pinwatch's own start-up line (where its control
        // socket and the console listen) and notes.
        Err(_) => tracing_subscriber::EnvFilter::new("warn,pinwatch=info"),
    };
    if tracing::dispatcher::has_been_set() {
        return Err(Error::Console(format!("{ALREADY_SET}{WRITE_INSTEAD}")));
    }
    console_env(|n| std::env::var(n).ok())?;
    // console-subscriber's server panics on its own thread when it cannot listen, and the
    // service would run on without a console: find out here, and say what to do.
    let bind = std::env::var("TOKIO_CONSOLE_BIND").unwrap_or_else(|_| "127.0.0.1:6669".into());
    if let Err(e) = std::net::TcpListener::bind(bind.as_str()) {
        return Err(Error::Console(format!(
            "PINWATCH_CONSOLE=on: the console server cannot listen on {bind} ({e}); set \
             TOKIO_CONSOLE_BIND to a free address, e.g. 127.0.0.1:6670"
        )));
    }
    let subscriber = tracing_subscriber::registry()
        .with(
            console_subscriber::ConsoleLayer::builder()
                .with_default_env()
                .spawn(),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Colours for a terminal only: a log file or a collector gets plain text.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_filter(filter),
        )
        // Last: the span chain on every pinned event.
        .with(crate::spans::tracing_layer());
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|_| Error::Console(ALREADY_SET.to_owned()))?;
    *installed = Some(bind);
    explain_a_second_subscriber();
    Ok(())
}

/// Checks the `TOKIO_CONSOLE_*` variables that console-subscriber parses with a panic (a
/// duration or a number it cannot read brings the service down at start-up, helper-95; a
/// recording file it cannot create, helper-96), or that would panic later in its server (an
/// interval or a buffer of zero): an error naming the variable instead.
fn console_env(get: impl Fn(&str) -> Option<String>) -> Result<(), Error> {
    for var in ["TOKIO_CONSOLE_RETENTION", "TOKIO_CONSOLE_PUBLISH_INTERVAL"] {
        let Some(v) = get(var) else { continue };
        match v.parse::<humantime::Duration>() {
            Ok(d) if var.ends_with("INTERVAL") && d.is_zero() => {
                return Err(Error::Console(format!(
                    "{var}={v:?} is zero; write a duration like `1s`"
                )))
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Console(format!(
                    "{var}={v:?} is not a duration ({e}); write it like `10m` or `1s`"
                )))
            }
        }
    }
    if let Some(path) = get("TOKIO_CONSOLE_RECORD_PATH") {
        // console-subscriber creates it at start-up, and panics if it cannot.
        if let Err(e) = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
        {
            return Err(Error::Console(format!(
                "TOKIO_CONSOLE_RECORD_PATH={path:?} cannot be written ({e}); give a file in a \
                 directory that exists and that this process may write to"
            )));
        }
    }
    if let Some(v) = get("TOKIO_CONSOLE_BUFFER_CAPACITY") {
        if !v.parse::<usize>().is_ok_and(|n| n > 0) {
            return Err(Error::Console(format!(
                "TOKIO_CONSOLE_BUFFER_CAPACITY={v:?} is not a number of events above 0; write \
                 it like `102400`"
            )));
        }
    }
    Ok(())
}

/// The address the server `PINWATCH_CONSOLE=on` installed listens on, once installed.
fn lock_installed() -> std::sync::MutexGuard<'static, Option<String>> {
    static INSTALLED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    INSTALLED.lock().unwrap_or_else(|p| p.into_inner())
}

/// What to write instead, when the service has a `tracing` subscriber of its own.
const WRITE_INSTEAD: &str = "keep your subscriber and put the console in it: \
     `tracing_subscriber::registry().with(pinwatch::console_layer()).with(tracing_subscriber::fmt::layer()).with(pinwatch::tracing_layer()).init()` \
     (with `use tracing_subscriber::prelude::*;`), and set PINWATCH_CONSOLE=resources (pinwatch \
     then adds its worker resources to your console); or drop your subscriber: with \
     PINWATCH_CONSOLE=on pinwatch's own prints to stderr, filtered by RUST_LOG";

const ALREADY_SET: &str = "PINWATCH_CONSOLE=on installs the process's tracing subscriber, but the \
     service has installed one already; ";

/// `PINWATCH_CONSOLE=on` has installed the process's subscriber: a service that then installs
/// its own (`tracing_subscriber::fmt().init()` in the body of `#[pinwatch::main]`, which runs
/// after the runtime is built) panics with tracing-subscriber's message. Say first, on stderr,
/// why and what to write instead; the panic goes on as it would.
fn explain_a_second_subscriber() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if msg.contains("SetGlobalDefaultError")
                || msg.contains("global default trace dispatcher has already been set")
            {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "pinwatch: PINWATCH_CONSOLE=on installed the process's tracing subscriber \
                     when the runtime was built, so the service cannot install its own \
                     (the panic below); {WRITE_INSTEAD}"
                );
            }
            previous(info);
        }));
    });
}

/// console-subscriber's layer, for a service that installs its own `tracing` subscriber: put it
/// in yours and set `PINWATCH_CONSOLE=resources` (or [`Console::Resources`](crate::Console)),
/// and pinwatch adds its worker resources to that console. Configured like
/// `console_subscriber::spawn()`, by `TOKIO_CONSOLE_BIND` and the other `TOKIO_CONSOLE_*`
/// variables; its server runs on a thread of its own.
///
/// ```no_run
/// use tracing_subscriber::prelude::*;
/// tracing_subscriber::registry()
///     .with(pinwatch::console_layer())
///     .with(tracing_subscriber::fmt::layer())
///     .init();
/// ```
pub fn console_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    console_subscriber::ConsoleLayer::builder()
        .with_default_env()
        .spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Reason;

    /// What console-subscriber would panic on is an error naming the variable; what it reads
    /// is taken.
    #[test]
    fn console_variables_it_would_panic_on_are_errors() {
        let env = crate::export::env_of;
        assert!(console_env(env(&[])).is_ok());
        assert!(console_env(env(&[
            ("TOKIO_CONSOLE_RETENTION", "5m"),
            ("TOKIO_CONSOLE_PUBLISH_INTERVAL", "500ms"),
            ("TOKIO_CONSOLE_BUFFER_CAPACITY", "1024"),
        ]))
        .is_ok());
        for (pairs, says) in [
            (
                &[("TOKIO_CONSOLE_RETENTION", "forever")][..],
                "TOKIO_CONSOLE_RETENTION=\"forever\" is not a duration (",
            ),
            (
                &[("TOKIO_CONSOLE_PUBLISH_INTERVAL", "0s")],
                "TOKIO_CONSOLE_PUBLISH_INTERVAL=\"0s\" is zero",
            ),
            (
                &[("TOKIO_CONSOLE_BUFFER_CAPACITY", "lots")],
                "TOKIO_CONSOLE_BUFFER_CAPACITY=\"lots\" is not a number",
            ),
            (
                &[("TOKIO_CONSOLE_BUFFER_CAPACITY", "0")],
                "TOKIO_CONSOLE_BUFFER_CAPACITY=\"0\" is not a number",
            ),
            (
                &[("TOKIO_CONSOLE_RECORD_PATH", "/nonexistent/dir/rec")],
                "TOKIO_CONSOLE_RECORD_PATH=\"/nonexistent/dir/rec\" cannot be written (",
            ),
        ] {
            let err = console_env(env(pairs)).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    fn worker() -> WorkerResource {
        // No subscriber in unit tests: the span is disabled and only the view changes.
        WorkerResource::new(0, Location::caller())
    }

    fn event(id: u64, state: State, ms: u64) -> PinnedEvent {
        PinnedEvent::for_test(id, state, Reason::Sleep, ms, 7)
    }

    #[test]
    fn a_pin_shows_while_it_lasts_and_counts_once() {
        let mut w = worker();
        w.event(&event(1, State::InProgress, 25));
        w.event(&event(1, State::InProgress, 1025));
        assert!(w.view.pinned);
        assert_eq!((w.view.task_id, w.view.pins), (1, 1));
        assert_eq!(w.view.reason, "sleep");
        assert!(w.view.advice.contains("tokio::time::sleep"), "{:?}", w.view);
        assert_eq!(w.view.pinned_for_ms, 1025);
        assert!(
            w.view.top_frame.starts_with("src/app.rs:7 app::f"),
            "{:?}",
            w.view
        );
        let live = HashMap::from([(1, Duration::from_millis(1300))]);
        w.tick(&live);
        assert_eq!(w.view.pinned_for_ms, 1300);
        w.event(&event(1, State::Completed, 1500));
        assert_eq!(w.view, View::idle(1, 1500, NONE.into()));
    }

    /// Records every update of one string attribute (`span` by default), as console-subscriber
    /// would read it.
    struct SpanUpdates(Arc<std::sync::Mutex<Vec<String>>>, &'static str);

    impl SpanUpdates {
        fn of_span(got: Arc<std::sync::Mutex<Vec<String>>>) -> SpanUpdates {
            SpanUpdates(got, "span")
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanUpdates {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct V<'a>(&'a std::sync::Mutex<Vec<String>>, &'static str);
            impl tracing::field::Visit for V<'_> {
                fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                    if field.name() == self.1 {
                        self.0.lock().unwrap().push(value.to_owned());
                    }
                }
                fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
            }
            if event.metadata().target() == "runtime::resource::state_update" {
                event.record(&mut V(&self.0, self.1));
            }
        }
    }

    #[test]
    fn the_resource_shows_the_request_span_set_once_then_overridden() {
        use tracing_subscriber::layer::SubscriberExt;
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let subscriber =
            tracing_subscriber::registry().with(SpanUpdates::of_span(Arc::clone(&got)));
        tracing::subscriber::with_default(subscriber, || {
            let mut w = worker();
            let mut e = event(1, State::InProgress, 25);
            e.spans = vec![
                crate::SpanInfo {
                    name: "conn".to_owned(),
                    ..Default::default()
                },
                crate::SpanInfo::for_test(
                    "request",
                    "tower_http::trace::make_span",
                    &[("method", "GET"), ("uri", "/report")],
                ),
            ];
            w.event(&e);
            // A later report in the same span sets nothing again.
            e.duration = Duration::from_millis(1025);
            w.event(&e);
            w.event(&event(1, State::Completed, 1500));
        });
        // A string from creation on (`-`), the request while pinned, `-` again after.
        assert_eq!(
            *got.lock().unwrap(),
            ["-", "request{method=GET uri=/report}", "-"]
        );
    }

    fn with_victims(
        mut e: PinnedEvent,
        measured: bool,
        tasks: usize,
        max_ms: Option<u64>,
    ) -> PinnedEvent {
        e.victims = Some(crate::event::Victims {
            measured,
            tasks,
            max_wait: max_ms.map(Duration::from_millis),
            total_wait: max_ms.map(|m| Duration::from_millis(m * tasks as u64)),
            ..Default::default()
        });
        e
    }

    /// The worker shows its last completed pin's victims: set at creation (`-`), overridden
    /// when a pin completes, kept while the next one runs (its partial victims are not shown).
    #[test]
    fn the_resource_shows_the_last_completed_pins_victims() {
        use tracing_subscriber::layer::SubscriberExt;
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let subscriber =
            tracing_subscriber::registry().with(SpanUpdates(Arc::clone(&got), "victims"));
        tracing::subscriber::with_default(subscriber, || {
            let mut w = worker();
            w.event(&with_victims(
                event(1, State::InProgress, 25),
                true,
                2,
                Some(40),
            ));
            assert_eq!(w.view.victims, "-");
            w.event(&with_victims(
                event(1, State::Completed, 320),
                true,
                11,
                Some(300),
            ));
            assert_eq!(w.view.victims, "11 delayed, max 300.0 ms");
            // The next pin runs: its partial victims do not replace the last completed pin's.
            w.event(&with_victims(
                event(2, State::InProgress, 25),
                true,
                1,
                Some(30),
            ));
            assert!(w.view.pinned);
            assert_eq!(w.view.victims, "11 delayed, max 300.0 ms");
            // It completes with victims that were not measured.
            w.event(&with_victims(
                event(2, State::Completed, 60),
                false,
                4,
                None,
            ));
            assert_eq!(w.view, View::idle(2, 380, "not measured".into()));
            // A retraction takes the pin back, not the victims shown.
            w.event(&event(3, State::InProgress, 25));
            w.event(&event(3, State::Retracted, 30));
            assert_eq!(w.view.victims, "not measured");
            w.event(&with_victims(event(4, State::Completed, 30), true, 0, None));
            assert_eq!(w.view.victims, "none delayed");
        });
        assert_eq!(
            *got.lock().unwrap(),
            [
                "-",
                "11 delayed, max 300.0 ms",
                "not measured",
                "none delayed"
            ]
        );
    }

    #[test]
    fn a_retracted_pin_is_taken_back() {
        let mut w = worker();
        w.event(&event(1, State::InProgress, 25));
        w.event(&event(1, State::Retracted, 40));
        assert_eq!(w.view, View::idle(0, 0, NONE.into()));
    }

    #[test]
    fn a_short_pin_seen_only_completed_counts() {
        let mut w = worker();
        w.event(&event(3, State::Completed, 30));
        assert_eq!(w.view, View::idle(1, 30, NONE.into()));
    }

    #[test]
    fn an_older_pin_ending_late_leaves_the_newer_one_shown() {
        let mut w = worker();
        w.event(&event(1, State::InProgress, 25));
        w.event(&event(2, State::InProgress, 25));
        w.event(&event(1, State::Completed, 60));
        assert!(w.view.pinned);
        assert_eq!(
            (w.view.task_id, w.view.pins, w.view.pinned_total_ms),
            (2, 2, 60)
        );
    }
}
