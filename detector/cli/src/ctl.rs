//! `pinwatch ctl`: a running service's control socket, like `jcmd <pid> JFR.*`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use pinwatch::control::client;
use pinwatch::control::protocol::{Reply, Request, Status};

/// How long to wait for a service's answer.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pinwatch ctl list\n  pinwatch ctl 4242 status --watch\n  pinwatch ctl 4242 set threshold=50ms stacks=full\n  pinwatch ctl 4242 record start /tmp/incident.jsonl --max-size 50MB --max-age 1h\n  pinwatch ctl 4242 record stop\n  pinwatch ctl 4242 pause"
)]
pub struct CtlArgs {
    /// `list` (the processes with pinwatch), or the service: its pid, `<pid>.<n>` for its n-th
    /// runtime, or the path of its control socket.
    target: String,
    #[command(subcommand)]
    action: Option<Action>,
    /// Where the control sockets are (default: PINWATCH_CONTROL if it names a directory, else
    /// /tmp/pinwatch-<uid>; root also looks in every user's).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Action {
    /// Settings, workers, who is pinned right now and for how long, top locations, counters.
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
        /// Refresh it in the terminal until interrupted.
        #[arg(long)]
        watch: bool,
        /// How often `--watch` refreshes.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: Duration,
        /// Stop `--watch` after this many refreshes.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Change settings while the service runs: `threshold=50ms`, `report_interval=5s`,
    /// `sample_interval=50ms`, `scan_interval=1ms`, `stacks=off|short|full`. All or none apply.
    Set {
        /// `key=value` pairs.
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// Start or stop a recording (JSON lines, as PINWATCH_RECORD makes).
    Record {
        #[command(subcommand)]
        what: RecordAction,
    },
    /// Report no new pins until `resume` (pins already reported are followed to their end).
    Pause,
    /// Report pins again.
    Resume,
}

#[derive(Subcommand)]
enum RecordAction {
    /// Record to FILE (appended to; rotated as `FILE.1`, … by size and age).
    Start {
        /// The file, as seen by the service (a relative path is made absolute here).
        file: PathBuf,
        /// Rotate before the file grows past this (`50MB`, `1GiB`, `off`); default: the
        /// service's PINWATCH_RECORD_MAX_SIZE.
        #[arg(long)]
        max_size: Option<String>,
        /// Rotate once the current file is this old (`1h`, `off`); default: the service's
        /// PINWATCH_RECORD_MAX_AGE.
        #[arg(long)]
        max_age: Option<String>,
        /// Rotated files kept; default: the service's PINWATCH_RECORD_KEEP.
        #[arg(long)]
        keep: Option<usize>,
    },
    /// Stop the recording; says what it wrote.
    Stop,
}

pub fn run(args: &CtlArgs) -> ExitCode {
    match run_(args) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "pinwatch ctl: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_(args: &CtlArgs) -> Result<ExitCode, String> {
    let dirs = match &args.dir {
        Some(d) => vec![d.clone()],
        None => client::search_dirs(),
    };
    let Some(action) = &args.action else {
        if args.target == "list" {
            return list(&dirs);
        }
        return Err(format!(
            "what should {} do? add one of: status, set, record, pause, resume \
             (`pinwatch ctl --help`)",
            args.target
        ));
    };
    let socket = client::find(&args.target, &dirs)?;
    let request = match action {
        Action::Status {
            json,
            watch,
            interval,
            count,
        } => {
            return if *watch {
                watch_status(&socket, *interval, *count)
            } else {
                let status = ask_status(&socket)?;
                Ok(if *json {
                    crate::print_out(
                        &(serde_json::to_string_pretty(&status).map_err(|e| e.to_string())? + "\n"),
                    )
                } else {
                    crate::print_out(&render_status(&status))
                })
            };
        }
        Action::Set { settings } => {
            let mut pairs = Vec::new();
            for s in settings {
                let Some((k, v)) = s.split_once('=') else {
                    return Err(format!(
                        "{s:?} is not key=value; write it like `threshold=50ms`"
                    ));
                };
                pairs.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            Request::Set { settings: pairs }
        }
        Action::Record {
            what:
                RecordAction::Start {
                    file,
                    max_size,
                    max_age,
                    keep,
                },
        } => Request::RecordStart {
            path: absolute(file)?,
            max_size: max_size.clone(),
            max_age: max_age.clone(),
            keep: *keep,
        },
        Action::Record {
            what: RecordAction::Stop,
        } => Request::RecordStop,
        Action::Pause => Request::Pause,
        Action::Resume => Request::Resume,
    };
    let reply = client::request(&socket, &request, TIMEOUT)?;
    if reply.ok {
        Ok(crate::print_out(&format!("{}\n", reply.message)))
    } else {
        Err(reply.message)
    }
}

fn absolute(file: &Path) -> Result<PathBuf, String> {
    if file.is_absolute() {
        return Ok(file.to_owned());
    }
    let cwd = std::env::current_dir()
        .map_err(|e| format!("cannot tell the current directory to make {file:?} absolute: {e}"))?;
    Ok(cwd.join(file))
}

fn ask_status(socket: &Path) -> Result<Status, String> {
    let reply: Reply = client::request(socket, &Request::Status, TIMEOUT)?;
    match reply {
        Reply {
            ok: true,
            status: Some(status),
            ..
        } => Ok(*status),
        r if !r.ok => Err(r.message),
        _ => Err(format!("{} answered no status", socket.display())),
    }
}

fn watch_status(socket: &Path, interval: Duration, count: Option<u64>) -> Result<ExitCode, String> {
    let mut shown = 0u64;
    loop {
        let status = ask_status(socket)?;
        // Clear the screen, cursor home: a refreshing view like `top`. A closed pipe ends it.
        if let Err(code) = crate::write_out(&format!(
            "\x1b[2J\x1b[Hpinwatch ctl {} status --watch: every {} (Ctrl-C stops)\n\n{}",
            status.pid,
            humantime::format_duration(interval),
            render_status(&status)
        )) {
            return Ok(code);
        }
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(interval);
    }
}

fn list(dirs: &[PathBuf]) -> Result<ExitCode, String> {
    let mut rows = Vec::new();
    for ep in client::endpoints(dirs) {
        // A process that did not give its status: what it said instead, in the last column.
        let unknown = |why: String| {
            let q = || "?".to_owned();
            [ep.name.clone(), q(), q(), q(), q(), why]
        };
        match client::request(&ep.path, &Request::Status, Duration::from_secs(2)) {
            Ok(Reply {
                ok: true,
                status: Some(st),
                ..
            }) => rows.push([
                ep.name.clone(),
                st.workers.to_string(),
                st.pinned.len().to_string(),
                if st.paused { "paused" } else { "on" }.to_owned(),
                human_ms(st.uptime_ms),
                st.command.clone(),
            ]),
            Ok(r) => rows.push(unknown(r.message)),
            Err(_) if client::is_stale(&ep.path) => {
                // Left by a process that died: nobody will answer there again.
                if std::fs::remove_file(&ep.path).is_ok() {
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "pinwatch ctl: removed {} (left by a process that is gone)",
                        ep.path.display()
                    );
                }
            }
            Err(e) => rows.push(unknown(e)),
        }
    }
    if rows.is_empty() {
        let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Ok(crate::print_out(&format!(
            "no process with pinwatch's control socket in {}\n",
            looked.join(", ")
        )));
    }
    Ok(crate::print_out(&table(
        &["PID", "WORKERS", "PINNED", "REPORTING", "UP", "COMMAND"],
        &rows,
    )))
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn table<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = headers.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

fn human_ms(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    // Whole seconds past a minute; tenths below.
    let d = if ms >= 60_000 {
        Duration::from_secs(ms / 1000)
    } else {
        Duration::from_millis(ms / 100 * 100)
    };
    humantime::format_duration(d).to_string()
}

fn bytes(b: u64) -> String {
    bytesize::ByteSize(b).display().si().to_string()
}

/// The status as text.
pub fn render_status(st: &Status) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "process    {} {}", st.pid, st.command);
    let _ = writeln!(
        w,
        "pinwatch   {} (run {}), up {}, socket {}",
        st.version,
        st.run_id.split('-').next().unwrap_or(&st.run_id),
        human_ms(st.uptime_ms),
        st.socket.display()
    );
    let _ = writeln!(
        w,
        "runtime    {}, {} worker{}, built at {}",
        st.flavor,
        st.workers,
        if st.workers == 1 { "" } else { "s" },
        st.built_at
    );
    let settings: Vec<String> = st
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(w, "settings   {}", settings.join(" "));
    if let Some(why) = &st.stacks_unavailable {
        let _ = writeln!(w, "           (no stacks can be sampled here: {why})");
    }
    let _ = writeln!(
        w,
        "reporting  {}",
        if st.paused {
            format!(
                "PAUSED: new pins are not reported (`pinwatch ctl {} resume`)",
                st.pid
            )
        } else {
            "on".to_owned()
        }
    );
    match &st.recording {
        None => {
            let _ = writeln!(w, "recording  off");
        }
        Some(r) => {
            let limit = match (r.max_size, r.max_age_ms) {
                (None, None) => "never rotated".to_owned(),
                (size, age) => {
                    let mut parts = Vec::new();
                    if let Some(s) = size {
                        parts.push(format!("at {}", bytes(s)));
                    }
                    if let Some(a) = age {
                        parts.push(format!("every {}", human_ms(a)));
                    }
                    format!("rotated {}, {} kept", parts.join(" or "), r.keep)
                }
            };
            let _ = writeln!(
                w,
                "recording  {}: {} events, {} written, current file {} ({limit}){}",
                r.path.display(),
                r.events,
                bytes(r.bytes),
                bytes(r.current_size),
                if r.write_errors > 0 {
                    format!(", {} events NOT written", r.write_errors)
                } else {
                    String::new()
                }
            );
            if r.rotation_errors > 0 {
                let _ = writeln!(
                    w,
                    "           {} rotations FAILED: the current file grows past its limit \
                     until one works (the service's log says why)",
                    r.rotation_errors
                );
            }
        }
    }
    let _ = writeln!(w);
    // A multi-thread runtime's `block_on` body holds no worker: it is said apart.
    let bodies = st.pinned.iter().filter(|p| p.worker.is_none()).count();
    let _ = writeln!(
        w,
        "pinned now: {} of {} worker{}{}{}",
        st.pinned.len() - bodies,
        st.workers,
        if st.workers == 1 { "" } else { "s" },
        if bodies > 0 {
            " (and the block_on body is blocked, holding no worker)"
        } else {
            ""
        },
        if st.pinned.iter().any(|p| p.runtime_stalled) {
            " — THE WHOLE RUNTIME IS STALLED: no timer fires, no I/O is read"
        } else {
            ""
        }
    );
    let rows: Vec<[String; 6]> = st
        .pinned
        .iter()
        .map(|p| {
            let why = match (&p.reason, &p.blocking_operation) {
                (Some(r), Some(op)) => format!("{r} ({op})"),
                (Some(r), None) => r.clone(),
                (None, _) => "(analysing)".to_owned(),
            };
            [
                p.worker
                    .map_or_else(|| "block_on".to_owned(), |i| format!("worker {i}")),
                p.task_id
                    .map_or_else(|| "-".to_owned(), |t| format!("task {t}")),
                human_ms(p.for_ms),
                why,
                if p.held_locks > 0 {
                    format!("{} lock(s)", p.held_locks)
                } else {
                    "-".to_owned()
                },
                p.top_frame
                    .clone()
                    .or_else(|| p.spawned_at.as_ref().map(|s| format!("spawned at {s}")))
                    .unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let t = table(&["WORKER", "TASK", "FOR", "WHY", "HOLDS", "WHERE"], &rows);
        for l in t.lines() {
            let _ = writeln!(w, "  {l}");
        }
    }
    let _ = writeln!(w);
    let _ = writeln!(w, "top locations since start: {}", st.top.len());
    let rows: Vec<[String; 5]> = st
        .top
        .iter()
        .map(|r| {
            let reasons: Vec<String> = r.reasons.iter().map(|(n, c)| format!("{n}={c}")).collect();
            [
                if r.in_progress > 0 {
                    format!("{} ({} running)", r.count, r.in_progress)
                } else {
                    r.count.to_string()
                },
                human_ms(r.longest_ms as u64),
                human_ms(r.total_ms as u64),
                reasons.join(","),
                r.frame.clone(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        let t = table(&["PINS", "LONGEST", "TOTAL", "REASONS", "LOCATION"], &rows);
        for l in t.lines() {
            let _ = writeln!(w, "  {l}");
        }
    }
    let _ = writeln!(w);
    let counters: Vec<String> = st
        .counters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(w, "counters   {}", counters.join(" "));
    out
}
