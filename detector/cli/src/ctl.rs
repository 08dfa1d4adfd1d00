//! `pinwatch ctl`: a running service's control socket, like `jcmd <pid> JFR.*`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use pinwatch::control::client;
use pinwatch::control::protocol::{Reply, Request, Status};
use pinwatch::export::RecordStatus;
use pinwatch::recording::SummaryRow;

/// How long a whole exchange with a service may take: connect, request, the full reply.
const TIMEOUT: Duration = client::DEADLINE;

/// The same for each socket `ctl list` asks ([`LIST_AT_ONCE`] at a time).
const LIST_TIMEOUT: Duration = Duration::from_secs(2);
/// All of `ctl list`'s asking: sockets that never answer (another user may make many) cannot
/// keep it waiting longer; the ones not asked by then are listed as such.
const LIST_TOTAL: Duration = Duration::from_secs(20);

/// How many sockets `list` asks at once.
const LIST_AT_ONCE: usize = 16;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  pinwatch ctl list\n  pinwatch ctl 4242 status --watch\n  pinwatch ctl 4242 set threshold=50ms stacks=full\n  pinwatch ctl 4242 record start /var/tmp/svc/incident.jsonl --max-size 50MB --max-age 1h\n  pinwatch ctl 4242 record list\n  pinwatch ctl 4242 record stop 1\n  pinwatch ctl 4242 dump incident.jsonl\n  pinwatch ctl 4242 report -o incident.html\n  pinwatch ctl 4242 profile -o pinned.pb.gz --seconds 600\n  pinwatch ctl 4242 pause"
)]
pub struct CtlArgs {
    /// `list` (the processes with pinwatch), or the service: its pid, `<pid>.<n>` for another
    /// of its detectors running at once, or the path of its control socket.
    target: String,
    #[command(subcommand)]
    action: Option<Action>,
    /// Where the control sockets are (default: PINWATCH_CONTROL if it names a directory, else
    /// /tmp/pinwatch-<uid>; root also looks in every user's).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// With `list`: print the processes as a JSON array, each with its `target` (what `ctl`
    /// takes), `socket`, and its `status` as `status --json` gives it, or the `error` that
    /// came instead. (An action's own `--json` goes after the action: `status --json`.)
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Action {
    /// Settings, workers, who is pinned right now and for how long, top locations, counters.
    Status {
        /// Print the status as JSON.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Refresh it in the terminal until interrupted.
        #[arg(long)]
        watch: bool,
        /// How often `--watch` refreshes (at least 100ms).
        #[arg(long, default_value = "1s", value_parser = watch_interval, requires = "watch")]
        interval: Duration,
        /// Stop `--watch` after this many refreshes.
        #[arg(long, requires = "watch")]
        count: Option<u64>,
    },
    /// Change settings while the service runs: `threshold=50ms`, `report_interval=5s`,
    /// `sample_interval=50ms`, `scan_interval=1ms`, `stacks=off|short|full`. All or none apply.
    Set {
        /// `key=value` pairs.
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// Start, list or stop recordings (JSON lines, as PINWATCH_RECORD makes); several may run
    /// at once, each with its own file and limits.
    Record {
        #[command(subcommand)]
        what: RecordAction,
    },
    /// Write the service's flight recording — the last pins it had, every report of each,
    /// recorded or not — to FILE: a recording that `print`, `summary` and `report` read, whose
    /// first line says which process it is from and what was dropped for space.
    Dump {
        /// The file, written here (by this command, not by the service); it must not exist
        /// unless `--force`. `-` is standard output.
        file: PathBuf,
        /// Replace FILE if it exists (whole, never left half written).
        #[arg(long)]
        force: bool,
    },
    /// Dump the flight recording and write it as an HTML page in one step (like `pinwatch
    /// report` on a dump).
    Report {
        /// Where to write the page; it must not exist unless `--force`. `-` is standard
        /// output.
        #[arg(short, long)]
        output: PathBuf,
        /// Replace the page if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Write the pinned-time profile (pprof, gzipped) of the pins in the service's flight
    /// recording, as `pinwatch profile` does for a recording and `/debug/pprof/pinned` serves;
    /// read it with `go tool pprof -symbolize=none -top FILE`.
    Profile {
        /// Where to write the profile; it must not exist unless `--force`. `-` is standard
        /// output.
        #[arg(short, long)]
        output: PathBuf,
        /// Only the pins that ran in the last N seconds (counted back from now).
        /// At least 1, as `/debug/pprof/pinned?seconds=N` takes it.
        #[arg(long, value_name = "N", value_parser = crate::seconds)]
        seconds: Option<u64>,
        /// Replace the file if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Report no new pins until `resume` (pins already reported are followed to their end).
    Pause,
    /// Report pins again.
    Resume,
}

#[derive(Subcommand)]
enum RecordAction {
    /// Record to FILE (appended to; rotated by size and age: `rec.jsonl` to `rec.1.jsonl`, …).
    Start {
        /// The file, as seen by the service (a relative path is made absolute here). Not `-`:
        /// the service writes to a file of its own (`./-` names a file called `-`).
        #[arg(value_parser = not_dash())]
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
    /// The recordings running: id (0 is the start-up one, PINWATCH_RECORD), file, since when,
    /// events, bytes, rotations, write errors.
    List {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a recording, by ID (`0` or `startup`: the start-up one) or by FILE; with neither,
    /// the only one running (refused when several run: say which). Says what it wrote.
    Stop {
        /// The recording's ID (`record list`), or its file (a relative path is made absolute
        /// here; write `./3` for a file named like an ID, `./-` for one named `-`).
        #[arg(value_parser = not_dash_str)]
        which: Option<String>,
    },
}

/// A parser's error of `ctl` whose first word (past `ctl`'s options) is an action, the pid left
/// out or put after it (`ctl status`, `ctl dump`, `ctl status 42`), said in words: the pid goes
/// before the action, and `ctl list` lists them; so is `ctl` alone. Any other error is left as
/// it is.
pub fn without_target(e: clap::Error) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return e;
    }
    // An option the parser does not know is the mistake to name, whatever the pid's place.
    if e.kind() == ErrorKind::UnknownArgument
        && matches!(e.get(ContextKind::InvalidArg),
            Some(ContextValue::String(a)) if a.starts_with('-'))
    {
        return e;
    }
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.get(1).map(String::as_str) != Some("ctl") {
        return e;
    }
    // The words that are no option nor an option's value, in order.
    let mut words = Vec::new();
    let mut rest = args[2..].iter();
    while let Some(a) = rest.next() {
        if a == "--dir" {
            rest.next();
        } else if !a.starts_with('-') || a == "-" {
            words.push(a.as_str());
        }
    }
    let actions = Action::augment_subcommands(clap::Command::new("ctl"));
    let Some(action) = words.first().and_then(|w| actions.find_subcommand(w)) else {
        let target_missing = e.kind() == ErrorKind::MissingRequiredArgument
            && matches!(e.get(ContextKind::InvalidArg),
                Some(ContextValue::Strings(s)) if s.iter().any(|a| a == "<TARGET>"));
        if !target_missing {
            return e;
        }
        return crate::usage_error(
            "ctl",
            "give the service's pid, as in `pinwatch ctl 4242 status`; `pinwatch ctl list` \
             lists the processes with pinwatch"
                .to_owned(),
        );
    };
    // The action said back as it was given (`record start` with its own word), and a pid given
    // after it taken for the one meant.
    let mut said = vec![action.get_name()];
    if let Some(sub) = words.get(1).and_then(|w| action.find_subcommand(w)) {
        said.push(sub.get_name());
    }
    let pid = words[said.len()..].iter().find(|w| {
        w.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    let more = words.len() > said.len() + usize::from(pid.is_some());
    let said = said.join(" ");
    crate::usage_error(
        "ctl",
        format!(
            "which service should `{said}` go to? give its pid before the action, as in `pinwatch \
         ctl {} {said}{}` (`pinwatch ctl list` lists the processes with pinwatch)",
            pid.copied().unwrap_or("4242"),
            if more { " …" } else { "" }
        ),
    )
}

impl Action {
    /// The word that asks for it.
    fn name(&self) -> &'static str {
        match self {
            Action::Status { .. } => "status",
            Action::Set { .. } => "set",
            Action::Record { .. } => "record",
            Action::Dump { .. } => "dump",
            Action::Report { .. } => "report",
            Action::Profile { .. } => "profile",
            Action::Pause => "pause",
            Action::Resume => "resume",
        }
    }
}

pub fn run(args: &CtlArgs) -> ExitCode {
    match run_request(args) {
        Ok(code) => code,
        Err(e) => {
            // Errors carry what a service (or whatever answered) said.
            let mut err = std::io::stderr().lock();
            for line in e.lines() {
                let _ = writeln!(err, "pinwatch ctl: {}", untrusted(line));
            }
            ExitCode::from(1)
        }
    }
}

fn run_request(args: &CtlArgs) -> Result<ExitCode, String> {
    let dirs = client::search_dirs(args.dir.as_deref());
    if args.target == "list" {
        if args.action.is_some() {
            return Err(
                "`list` takes no action: `pinwatch ctl list` lists the processes with pinwatch; \
                 then give one's pid, as in `pinwatch ctl <pid> status`"
                    .to_owned(),
            );
        }
        return list(&dirs, args.json);
    }
    let Some(action) = &args.action else {
        // `ctl -- help`: what `ctl help` and `ctl --help` print (clap adds its `help` when it
        // builds the command, so it is not among the actions below).
        if args.target == "help" {
            crate::print_help_of("ctl");
            return Ok(ExitCode::SUCCESS);
        }
        // The actions as the parser has them, so that none is left out of the hint.
        let actions: Vec<String> = Action::augment_subcommands(clap::Command::new("ctl"))
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        // `ctl -- status`: the action was taken for the target. A usage error, as `ctl status`
        // is (status 2, the usage line).
        if actions.contains(&args.target) {
            crate::usage_error(
                "ctl",
                format!(
                    "`{}` is an action: give the service's pid before it, as in `pinwatch ctl \
                     4242 {}`; `pinwatch ctl list` lists the processes with pinwatch",
                    args.target, args.target
                ),
            )
            .exit();
        }
        return Err(format!(
            "what should {} do? add one of: {} (`pinwatch ctl --help`)",
            args.target,
            actions.join(", ")
        ));
    };
    if args.json {
        let own_json = match action {
            Action::Status { .. } => Some("status"),
            Action::Record {
                what: RecordAction::List { .. },
            } => Some("record list"),
            _ => None,
        };
        return Err(match own_json {
            Some(words) => format!(
                "--json goes after the action: `pinwatch ctl {} {words} --json`",
                args.target
            ),
            None => format!(
                "--json before the action goes with `list` only, and `{}` prints no JSON",
                action.name()
            ),
        });
    }
    let socket = client::find(&args.target, &dirs).map_err(|e| e.to_string())?;
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
                    crate::print_out(&format!(
                        "{}\n",
                        json_safe(
                            &serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?
                        )
                    ))
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
            what: RecordAction::Stop { which },
        } => match which.as_deref().map(which_recording).transpose()? {
            None => Request::RecordStop {
                id: None,
                path: None,
            },
            Some(Ok(id)) => Request::RecordStop {
                id: Some(id),
                path: None,
            },
            Some(Err(path)) => Request::RecordStop {
                id: None,
                path: Some(path),
            },
        },
        Action::Record {
            what: RecordAction::List { json },
        } => return record_list(&socket, *json),
        Action::Dump { file, force } => return dump(&socket, file, *force),
        Action::Report { output, force } => return report(&socket, output, *force),
        Action::Profile {
            output,
            seconds,
            force,
        } => return profile(&socket, output, *seconds, *force),
        Action::Pause => Request::Pause,
        Action::Resume => Request::Resume,
    };
    let reply = client::request(&socket, &request, TIMEOUT).map_err(|e| e.to_string())?;
    if reply.ok {
        let text: String = reply
            .message
            .lines()
            .map(|line| format!("{}\n", untrusted(line)))
            .collect();
        Ok(crate::print_out(&text))
    } else {
        Err(reply.message)
    }
}

/// `record stop`'s argument: a recording's id (`startup` is 0), else its file made absolute.
fn which_recording(s: &str) -> Result<Result<u64, PathBuf>, String> {
    if s == "startup" {
        return Ok(Ok(0));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(Ok).map_err(|_| {
            format!(
                "{s} is no recording id (too large); see `record list`, or write ./{s} for a file"
            )
        });
    }
    absolute(Path::new(s)).map(Err)
}

/// `record list`: a table, or JSON.
fn record_list(socket: &client::Endpoint, json: bool) -> Result<ExitCode, String> {
    let reply =
        client::request(socket, &Request::RecordList, TIMEOUT).map_err(|e| e.to_string())?;
    if !reply.ok {
        return Err(reply.message);
    }
    let Some(list) = reply.recordings else {
        return Err(format!(
            "{} answered no list of recordings",
            socket.path.display()
        ));
    };
    if json {
        return Ok(crate::print_out(&format!(
            "{}\n",
            json_safe(&serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?)
        )));
    }
    let list = escaped(&list)?;
    if list.is_empty() {
        return Ok(crate::print_out(
            "no recording is running; start one with `record start FILE`\n",
        ));
    }
    let rows: Vec<[String; 7]> = list
        .iter()
        .map(|r| {
            [
                record_label(r),
                since(r.started_ms),
                r.events.to_string(),
                bytes(r.bytes),
                r.rotations.to_string(),
                r.write_errors.to_string(),
                r.path.display().to_string(),
            ]
        })
        .collect();
    Ok(crate::print_out(&table(
        &[
            "ID",
            "SINCE",
            "EVENTS",
            "BYTES",
            "ROTATIONS",
            "WRITE ERRORS",
            "FILE",
        ],
        &rows,
    )))
}

/// `0 (startup)`, `3`; `-` from a service older than recording ids.
fn record_label(r: &RecordStatus) -> String {
    match (r.id, r.startup) {
        (Some(id), true) => format!("{id} (startup)"),
        (Some(id), false) => id.to_string(),
        (None, _) => "-".to_owned(),
    }
}

/// A start time in ms since the epoch, as UTC (`2026-12-01T12:15:11Z`); `?` when unknown.
fn since(ms: u64) -> String {
    if ms == 0 {
        return "?".to_owned();
    }
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// How long a dump may take in all: the service's own bound on sending it.
const DUMP_TIMEOUT: Duration = pinwatch::control::DUMP_DEADLINE;

/// `ctl <pid> dump FILE`: the service sends its flight recording over the socket and this
/// process writes it (so a relative path is relative to here, and the service never writes
/// where a client asked), whole or not at all.
fn dump(socket: &client::Endpoint, file: &Path, force: bool) -> Result<ExitCode, String> {
    let mut said = None;
    crate::write_file(file, force, |f| {
        // The client makes a sentence of every failure; whether a write into `f` found its
        // reader gone is kept apart (a closed pipe ends the command quietly).
        let mut out = NotingClosed {
            inner: f,
            closed: false,
        };
        let reply = client::dump(socket, DUMP_TIMEOUT, &mut out).map_err(|e| {
            if out.closed {
                std::io::Error::from(std::io::ErrorKind::BrokenPipe)
            } else {
                std::io::Error::other(e)
            }
        })?;
        if !reply.ok {
            return Err(std::io::Error::other(reply.message));
        }
        said = Some(reply.message);
        Ok(())
    })
    .map_err(|e| format!("cannot dump to {}: {e}", crate::output_name(file)))?;
    Ok(crate::say_wrote(
        file,
        &format!(
            "wrote {}: {}\n",
            crate::output_name(file),
            untrusted(&said.unwrap_or_default())
        ),
    ))
}

/// A writer that notes whether a write found the reader of its pipe gone (`EPIPE`).
struct NotingClosed<'a> {
    inner: &'a mut std::fs::File,
    closed: bool,
}

impl std::io::Write for NotingClosed<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf);
        self.closed |= written
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe);
        written
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// What `ctl report -o` and `ctl profile -o` start with: refuse an existing `output` unless
/// `force` (before asking the service for anything), then the service's dump, read as a
/// recording named `name` in messages.
fn dumped_recording(
    socket: &client::Endpoint,
    output: &Path,
    force: bool,
    name: &str,
) -> Result<pinwatch::recording::Recording, String> {
    if crate::is_dash(output) {
        // Refused before the service is asked for its dump, as `write_file` would refuse it.
        use std::io::IsTerminal as _;
        if std::io::stdout().is_terminal() {
            return Err(format!(
                "cannot write standard output: {}",
                crate::TERMINAL_REFUSED
            ));
        }
    } else {
        // Another user's link in a shared directory is refused as such, not as a file that
        // exists, whose advice (`--force`) would then be refused for the link.
        pinwatch::files::planted_symlinks(output)
            .map_err(|e| format!("cannot write {}: {e}", crate::output_name(output)))?;
        let taken = std::fs::symlink_metadata(output);
        let dir = taken.as_ref().is_ok_and(|m| m.is_dir());
        if dir || !force && taken.is_ok() && !crate::written_as_is(output) {
            return Err(pinwatch::files::taken(output));
        }
    }
    let mut bytes = Vec::new();
    let reply = client::dump(socket, DUMP_TIMEOUT, &mut bytes).map_err(|e| e.to_string())?;
    if !reply.ok {
        return Err(reply.message);
    }
    let text = String::from_utf8_lossy(&bytes);
    pinwatch::recording::parse_recording(&text, name).map_err(|e| e.to_string())
}

/// `ctl <pid> report -o PAGE`: a dump, read and rendered as `pinwatch report` does.
fn report(socket: &client::Endpoint, output: &Path, force: bool) -> Result<ExitCode, String> {
    let name = format!("pid {}", socket.pid);
    let rec = dumped_recording(socket, output, force, &name)?;
    let source = rec
        .describe_dumps()
        .first()
        .cloned()
        .unwrap_or_else(|| format!("flight recording of {name}"));
    let page = pinwatch_cli::report::render(&rec.events, &source, &rec.warnings)?;
    crate::write_file(output, force, |f| f.write_all(page.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", crate::output_name(output)))?;
    let pins = pinwatch::recording::latest_reports(&rec.events).len();
    Ok(crate::say_wrote(
        output,
        &format!(
            "wrote {} ({}; {}){}\n",
            crate::output_name(output),
            crate::events_and_pins(rec.events.len(), pins),
            untrusted(&source),
            crate::open_it(output)
        ),
    ))
}

/// `ctl <pid> profile -o FILE`: a dump, made into the pinned-time profile here (the same
/// [`pinwatch::profile`] the service's `/debug/pprof/pinned` serves).
fn profile(
    socket: &client::Endpoint,
    output: &Path,
    seconds: Option<u64>,
    force: bool,
) -> Result<ExitCode, String> {
    let rec = dumped_recording(socket, output, force, &format!("pid {}", socket.pid))?;
    let mut options = pinwatch::profile::Options::default();
    if let Some(n) = seconds {
        let since = std::time::SystemTime::now()
            .checked_sub(Duration::from_secs(n))
            .unwrap_or(std::time::UNIX_EPOCH);
        options = options.since(since);
    }
    let built = pinwatch::profile::build(&rec.events, &options);
    let pins: i64 = built.sample.iter().map(|s| s.value[0]).sum();
    if pins == 0 {
        let when = seconds.map_or(String::new(), |n| format!(" that ran in the last {n} s"));
        return Err(format!(
            "the flight recording of pid {} holds no pins{when}: no profile written",
            socket.pid
        ));
    }
    let nanos = built
        .sample
        .iter()
        .fold(0i64, |t, s| t.saturating_add(s.value[1]));
    let body = pinwatch::profile::encode(&built);
    crate::write_file(output, force, |f| f.write_all(&body))
        .map_err(|e| format!("cannot write {}: {e}", crate::output_name(output)))?;
    Ok(crate::say_profile_written(
        output,
        pins,
        nanos,
        built.sample.len(),
    ))
}

/// Why `-` is refused where the service's file is named (`record start`, `record stop`): every
/// other command takes it for a standard stream, and the service writes to a file of its own.
const DASH_REFUSED: &str = "the service records to a file of its own, not to this command's \
                            output; name the file (`./-` for one called `-`), and read it with \
                            `pinwatch print`";

/// A file the service writes: `-` is refused ([`DASH_REFUSED`]) rather than taken for a file
/// named `-` in this directory.
fn not_dash() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    use clap::builder::TypedValueParser as _;
    clap::builder::OsStringValueParser::new().try_map(|s| {
        if s == "-" {
            Err(DASH_REFUSED)
        } else {
            Ok(PathBuf::from(s))
        }
    })
}

/// `record stop`'s ID or file: `-` is refused, as by `record start`.
fn not_dash_str(s: &str) -> Result<String, &'static str> {
    if s == "-" {
        Err(DASH_REFUSED)
    } else {
        Ok(s.to_owned())
    }
}

/// `file` made absolute, for the service: a path the control protocol (JSON) can carry.
fn absolute(file: &Path) -> Result<PathBuf, String> {
    let path = if file.is_absolute() {
        file.to_owned()
    } else {
        let cwd = std::env::current_dir().map_err(|e| {
            format!("cannot tell the current directory to make {file:?} absolute: {e}")
        })?;
        cwd.join(file)
    };
    if path.to_str().is_none() {
        return Err(format!(
            "{} is not UTF-8, which the request to the service (JSON) cannot carry; give a name \
             in UTF-8",
            pinwatch::text::Escaped(path.display())
        ));
    }
    Ok(path)
}

fn ask_status(socket: &client::Endpoint) -> Result<Status, String> {
    let reply: Reply =
        client::request(socket, &Request::Status, TIMEOUT).map_err(|e| e.to_string())?;
    match reply {
        Reply {
            ok: true,
            status: Some(status),
            ..
        } => Ok(*status),
        r if !r.ok => Err(r.message),
        _ => Err(format!("{} answered no status", socket.path.display())),
    }
}

/// `status --interval`: a duration of at least 100 ms (each refresh is a request to the
/// service; a shorter period would spin on its control socket).
fn watch_interval(v: &str) -> Result<Duration, String> {
    let floor = Duration::from_millis(100);
    match humantime::parse_duration(v.trim()) {
        Ok(d) if d < floor => Err("must be at least 100ms".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(format!(
            "is not a duration ({e}); write it like `1s` or `500ms`"
        )),
    }
}

fn watch_status(
    socket: &client::Endpoint,
    interval: Duration,
    count: Option<u64>,
) -> Result<ExitCode, String> {
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

fn list(dirs: &client::Dirs, json: bool) -> Result<ExitCode, String> {
    if dirs.looked.len() == 1 && dirs.dirs.is_empty() && !dirs.skipped.is_empty() {
        // The one directory to look in (`--dir`, `PINWATCH_CONTROL`, or the caller's own) could
        // not be used: that is no answer that nothing runs (helper-83: exit 0 for a `--dir`
        // that does not exist). Root, looking in every user's, passes over another's.
        let why: Vec<String> = dirs.skipped.iter().map(|n| untrusted(n)).collect();
        return Err(format!("cannot list: {}", why.join("; ")));
    }
    let (endpoints, skipped) = dirs.endpoints();
    for note in dirs.skipped.iter().chain(&skipped) {
        let _ = writeln!(
            std::io::stderr().lock(),
            "pinwatch ctl: skipped {}",
            untrusted(note)
        );
    }
    let answers = ask_all(&endpoints);
    // Each process's status, or what it said instead (in the text, in the last column).
    let mut listed: Vec<Listed> = Vec::new();
    for (ep, answer) in endpoints.into_iter().zip(answers) {
        let status = match answer {
            None => Err(format!(
                "not asked: ctl list gives all sockets {} in all; ask it directly with \
                 `pinwatch ctl {} status`",
                humantime::format_duration(LIST_TOTAL),
                ep.name
            )),
            Some(Ok(Reply {
                ok: true,
                status: Some(st),
                ..
            })) => Ok(st),
            Some(Ok(r)) => Err(r.message),
            // Left by a process that died: nobody will answer there again.
            Some(Err(_)) if dirs.remove_if_stale(&ep) => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "pinwatch ctl: removed {} (left by a process that is gone)",
                    untrusted(&ep.path.display().to_string())
                );
                continue;
            }
            Some(Err(e)) => Err(e),
        };
        listed.push(Listed {
            target: ep.name,
            socket: ep.path,
            status,
        });
    }
    if json {
        // Fields in the order the docs give, each status in `status --json`'s own order.
        #[derive(serde::Serialize)]
        struct Entry<'a> {
            target: &'a str,
            socket: std::borrow::Cow<'a, str>,
            status: Option<&'a Status>,
            error: Option<&'a str>,
        }
        let list: Vec<Entry> = listed
            .iter()
            .map(|l| Entry {
                target: &l.target,
                socket: l.socket.to_string_lossy(),
                status: l.status.as_deref().ok(),
                error: l.status.as_ref().err().map(String::as_str),
            })
            .collect();
        let text = serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?;
        return Ok(crate::print_out(&format!("{}\n", json_safe(&text))));
    }
    if listed.is_empty() {
        let looked: Vec<String> = dirs
            .looked
            .iter()
            .map(|d| untrusted(&d.display().to_string()))
            .collect();
        return Ok(crate::print_out(&format!(
            "no process with pinwatch's control socket in {}\n",
            looked.join(", ")
        )));
    }
    let mut rows = Vec::new();
    for l in listed {
        rows.push(match l.status {
            Ok(st) => {
                let st = escaped(&st)?;
                [
                    l.target,
                    st.workers.to_string(),
                    // Workers pinned: a multi-thread runtime's block_on body holds none.
                    st.pinned
                        .iter()
                        .filter(|p| p.worker.is_some())
                        .count()
                        .to_string(),
                    if st.paused { "paused" } else { "on" }.to_owned(),
                    human_ms(st.uptime_ms),
                    st.command,
                ]
            }
            Err(why) => {
                let q = || "?".to_owned();
                [l.target, q(), q(), q(), q(), untrusted(&why)]
            }
        });
    }
    Ok(crate::print_out(&table(
        &["PID", "WORKERS", "PINNED", "REPORTING", "UP", "COMMAND"],
        &rows,
    )))
}

/// One process `ctl list` found: how `ctl` names it, its socket, and its status or why there is
/// none.
struct Listed {
    target: String,
    socket: PathBuf,
    status: Result<Box<Status>, String>,
}

/// Asks each of `endpoints` for its status, [`LIST_AT_ONCE`] at a time, each within
/// [`LIST_TIMEOUT`] and all within [`LIST_TOTAL`]: the answers in `endpoints`' order, `None`
/// for those not asked by then. Sockets that never answer (another user's, or a hung service)
/// cost one timeout for each [`LIST_AT_ONCE`] of them, not one each; and they are asked in
/// [`ask_order`], so that one user's many cannot crowd out another's.
fn ask_all(endpoints: &[client::Endpoint]) -> Vec<Option<Result<Reply, String>>> {
    let deadline = std::time::Instant::now() + LIST_TOTAL;
    let ask = |ep: &client::Endpoint, timeout: Duration| {
        client::request(ep, &Request::Status, timeout).map_err(|e| e.to_string())
    };
    let owners: Vec<u32> = endpoints.iter().map(|ep| ep.owner).collect();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let order = ask_order(&owners, unsafe { libc::geteuid() });
    let mut answers: Vec<Option<Result<Reply, String>>> = endpoints.iter().map(|_| None).collect();
    for chunk in order.chunks(LIST_AT_ONCE) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let timeout = LIST_TIMEOUT.min(left);
        std::thread::scope(|s| {
            // A thread that cannot be made: that one is asked here, after the others.
            let asked: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    let ep = &endpoints[i];
                    let thread = std::thread::Builder::new()
                        .spawn_scoped(s, move || ask(ep, timeout))
                        .map_err(|_| ep);
                    (i, thread)
                })
                .collect();
            for (i, a) in asked {
                answers[i] = Some(match a {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|_| Err("asking it failed".to_owned())),
                    Err(ep) => ask(ep, timeout),
                });
            }
        });
    }
    answers
}

/// The order `ctl list` asks its sockets in, as indexes, from the uid that owns each
/// (`owners`, in pid order): all of the caller's own (uid `me`) first, then each other
/// owner's in turn — every owner's first socket, then every owner's second, and so on, each
/// owner's by pid. Any local user may fill their own directory with sockets
/// that never answer (helper-84: 200 of them hid a root service behind "not asked"); this
/// way they use up only their own share of [`LIST_TOTAL`].
fn ask_order(owners: &[u32], me: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..owners.len()).filter(|&i| owners[i] == me).collect();
    // Each other owner's, by uid: one pass, however many owners.
    let mut by_owner: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (i, &o) in owners.iter().enumerate().filter(|(_, &o)| o != me) {
        by_owner.entry(o).or_default().push(i);
    }
    let mine: Vec<Vec<usize>> = by_owner.into_values().collect();
    for turn in 0.. {
        let before = order.len();
        order.extend(mine.iter().filter_map(|theirs| theirs.get(turn)));
        if order.len() == before {
            break;
        }
    }
    order
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
fn table<const N: usize>(headers: &[&str; N], rows: &[[String; N]]) -> String {
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.to_vec()).collect();
    table_of(headers, &rows)
}

/// [`table`] with as many columns as `headers` has (each row has that many cells).
fn table_of(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(pinwatch::text::column_width(cell.chars().count()));
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == n {
                l.push_str(cell);
            } else {
                pinwatch::text::pad(&mut l, cell, widths[i], false);
                l.push_str("  ");
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

/// Under a table: what usually fixes each reason in it, once per advice.
fn advice_lines<'a>(w: &mut String, pairs: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut seen: Vec<&str> = Vec::new();
    for (reason, advice) in pairs {
        if !seen.contains(&advice) {
            seen.push(advice);
            let _ = writeln!(w, "  advice ({reason}): {advice}");
        }
    }
}

/// The most characters of a DELAYED cell (a crafted reply's numbers cannot widen the table).
const DELAYED_WIDTH: usize = 32;

/// A pin's DELAYED cell: `11 (max 300.2 ms)` measured, `next: 3 (not measured)` not.
fn delayed_cell(d: &pinwatch::control::protocol::Delayed) -> String {
    let cell = match (d.measured, d.max_wait_ms) {
        (true, Some(max)) => format!("{} (max {})", d.tasks, pinwatch::recording::human_ms(max)),
        (true, _) if d.tasks == 0 => "none".to_owned(),
        (true, None) => d.tasks.to_string(),
        (false, _) => format!("next: {} (not measured)", d.tasks),
    };
    pinwatch::text::bounded(&cell, DELAYED_WIDTH)
}

fn human_ms(ms: u64) -> String {
    pinwatch::recording::human_ms(ms as f64)
}

fn bytes(b: u64) -> String {
    bytesize::ByteSize(b).display().si().to_string()
}

/// `s` as it may be shown on a terminal: escaped by the one rule of [`pinwatch::text`], so
/// that nothing a service — or whatever answers on its socket — says can move the cursor,
/// retitle the window, clear the screen or reorder the text. Every string from a reply goes
/// through here before it is shown.
pub fn untrusted(s: &str) -> String {
    pinwatch::text::escape(s)
}

/// `value` with every string in it passed through [`untrusted`] (whatever field it is in, so a
/// field added later is covered too).
fn escaped<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> Result<T, String> {
    let mut v = serde_json::to_value(value).map_err(|e| e.to_string())?;
    pinwatch::text::escape_json_strings(&mut v);
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// JSON text safe on a terminal ([`pinwatch::text::json_safe`]).
pub(crate) fn json_safe(json: &str) -> String {
    pinwatch::text::json_safe(json)
}

/// The status as text; every string in it escaped ([`untrusted`]).
pub fn render_status(st: &Status) -> String {
    match escaped(st) {
        Ok(st) => render(&st),
        // Cannot happen (a status is made of JSON); if it did, the lines are escaped whole.
        Err(_) => render(st).lines().map(|l| untrusted(l) + "\n").collect(),
    }
}

fn render(st: &Status) -> String {
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
        .map(|(k, v)| match (k.as_str(), &st.scan_interval_in_force) {
            ("scan_interval", Some(d)) => format!("{k}={v} ({d} in force)"),
            _ => format!("{k}={v}"),
        })
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
    // A service older than several recordings sends only `recording`.
    let recordings: Vec<&RecordStatus> = if st.recordings.is_empty() {
        st.recording.iter().collect()
    } else {
        st.recordings.iter().collect()
    };
    if recordings.is_empty() {
        let _ = writeln!(w, "recording  off");
    }
    for r in recordings {
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
            "recording  {}{}: {} events, {} written, current file {} ({limit}){}",
            r.id.map_or_else(String::new, |_| format!("{} ", record_label(r))),
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
    // The DELAYED column only when a pin says who waited behind it (a service that records
    // victims); the REQUEST column only when a pin is in a span (the service has the tracing
    // layer).
    let delayed = st.pinned.iter().any(|p| p.delayed.is_some());
    let request = st.pinned.iter().any(|p| p.span.is_some());
    let rows: Vec<Vec<String>> = st
        .pinned
        .iter()
        .map(|p| {
            let why = match (&p.reason, &p.blocking_operation) {
                (Some(r), Some(op)) => format!("{r} ({op})"),
                (Some(r), None) => r.clone(),
                (None, _) => "(analysing)".to_owned(),
            };
            let mut row = vec![
                p.worker
                    .map_or_else(|| "block_on".to_owned(), |i| format!("worker {i}")),
                p.task_id
                    .map_or_else(|| "-".to_owned(), |t| format!("task {t}")),
                human_ms(p.for_ms),
            ];
            if delayed {
                row.push(
                    p.delayed
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), delayed_cell),
                );
            }
            row.extend([
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
            ]);
            if request {
                // Which request: its route (and the innermost span), with the trace to look it up by.
                row.push(match (&p.span, &p.trace_id) {
                    (Some(span), Some(trace)) => format!("{span} trace={trace}"),
                    (Some(span), None) => span.clone(),
                    (None, _) => "-".to_owned(),
                });
            }
            row
        })
        .collect();
    if !rows.is_empty() {
        let mut headers = vec!["WORKER", "TASK", "FOR"];
        if delayed {
            headers.push("DELAYED");
        }
        headers.extend(["WHY", "HOLDS", "WHERE"]);
        if request {
            headers.push("REQUEST");
        }
        let t = table_of(&headers, &rows);
        for l in t.lines() {
            let _ = writeln!(w, "  {l}");
        }
    }
    for p in &st.pinned {
        let who = p
            .worker
            .map_or_else(|| "block_on".to_owned(), |i| format!("worker {i}"));
        if let Some(from) = &p.called_from {
            let _ = writeln!(w, "  {who}: called from {from}");
        }
        if let Some(stall) = &p.stall {
            let _ = writeln!(w, "  {who}: {stall}");
        }
        if let Some(advice) = &p.runtime_advice {
            let _ = writeln!(w, "  {who}, the runtime: {advice}");
        }
        if let Some(d) = p.delayed.as_ref().and_then(|d| d.description.as_ref()) {
            let _ = writeln!(w, "  {who}: {d}");
        }
    }
    advice_lines(
        w,
        st.pinned
            .iter()
            .filter_map(|p| Some((p.reason.as_deref()?, p.advice.as_deref()?))),
    );
    let _ = writeln!(w);
    let _ = writeln!(w, "top locations since start: {}", st.top.len());
    // Per function, then its lines (indented).
    let row = |r: &SummaryRow, location: String| {
        let reasons: Vec<String> = r.reasons.iter().map(|(n, c)| format!("{n}={c}")).collect();
        [
            if r.in_progress > 0 {
                format!("{} ({} running)", r.count, r.in_progress)
            } else {
                r.count.to_string()
            },
            pinwatch::recording::human_ms(r.longest_ms),
            pinwatch::recording::human_ms(r.total_ms),
            reasons.join(","),
            location,
        ]
    };
    let rows: Vec<[String; 5]> = st
        .top
        .iter()
        .flat_map(|r| {
            std::iter::once(row(r, r.frame.clone()))
                .chain(r.lines.iter().map(|l| row(l, format!("  {}", l.at))))
        })
        .collect();
    if !rows.is_empty() {
        let t = table(&["PINS", "LONGEST", "TOTAL", "REASONS", "LOCATION"], &rows);
        for l in t.lines() {
            let _ = writeln!(w, "  {l}");
        }
    }
    advice_lines(
        w,
        st.top.iter().filter_map(|r| {
            let (reason, _) = r.reasons.first()?;
            (!r.advice.is_empty()).then_some((reason.as_str(), r.advice.as_str()))
        }),
    );
    let _ = writeln!(w);
    let counters: Vec<String> = st
        .counters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(w, "counters   {}", counters.join(" "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory named with `--dir` that cannot be used is an error, not an empty list.
    #[test]
    fn ctl_list_of_a_directory_that_cannot_be_used_fails() {
        let gone = tempfile::tempdir().unwrap().path().join("gone");
        let e = list(&client::search_dirs(Some(&gone)), false).unwrap_err();
        assert!(e.starts_with("cannot list: cannot open "), "{e}");
        assert!(e.contains(&gone.display().to_string()), "{e}");
    }

    /// One user's many sockets cannot push another's past `ctl list`'s time: the caller's own
    /// are asked first, then each owner's in turn (helper-84: 200 sockets of a user's that
    /// never answer left root's one service "not asked").
    #[test]
    fn ctl_list_asks_each_owner_in_turn_its_callers_first() {
        // By pid: a flood of user 1001's, then root's service, then user 1002's two.
        let mut owners = vec![1001; 200];
        owners.extend([0, 1002, 1002]);
        let order = ask_order(&owners, 0);
        assert_eq!(order[..4], [200, 0, 201, 1]);
        assert_eq!(ask_order(&owners, 1002)[..4], [201, 202, 200, 0]);
        // All of the caller's first, however many (helper-85: interleaved with another's).
        assert_eq!(
            ask_order(&[0, 0, 0, 1001, 1001, 1001], 0),
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!(ask_order(&[1001, 0, 1001, 0], 0), [1, 3, 0, 2]);
        // Each once.
        let mut all = order.clone();
        all.sort_unstable();
        assert_eq!(all, (0..owners.len()).collect::<Vec<_>>());
        assert!(ask_order(&[], 0).is_empty());
    }

    /// A path the JSON request cannot carry is refused before anything is sent, named (escaped)
    /// and with what to do; serde's own "path contains invalid UTF-8 characters" said neither.
    #[test]
    fn a_path_that_is_not_utf8_is_named_and_refused() {
        use std::os::unix::ffi::OsStrExt;
        let bad = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff\x1b.jsonl"));
        let e = absolute(bad).unwrap_err();
        assert!(
            e.contains(r"\u{1b}") && e.contains("give a name in UTF-8"),
            "{e}"
        );
        assert!(!e.contains('\u{1b}'), "{e}");
        assert_eq!(
            absolute(Path::new("/tmp/ok.jsonl")).unwrap(),
            Path::new("/tmp/ok.jsonl")
        );
    }

    #[test]
    fn status_shows_the_request_each_pin_is_in_escaped() {
        let pinned = |id: u64, span: Option<&str>, trace: Option<&str>| {
            serde_json::json!({
                "id": id, "for_ms": 1500, "worker": 1, "tid": 42, "task_id": 7,
                "spawned_at": "src/main.rs:30:5", "reason": "sleep",
                "blocking_operation": "clock_nanosleep", "top_frame": "svc::slow (src/main.rs:16)",
                "held_locks": 0, "span": span, "trace_id": trace,
            })
        };
        let st: Status = serde_json::from_value(serde_json::json!({
            "pid": 1, "socket": "/run/x.sock", "command": "svc", "version": "0.1.0",
            "run_id": "r", "uptime_ms": 10, "built_at": "src/main.rs:1", "flavor": "multi_thread",
            "workers": 2, "settings": [], "paused": false, "pinned": [
                pinned(1, Some("request{method=GET uri=/report\u{1b}[2J}"),
                    Some("4bf92f3577b34da6a3ce929d0e0e4736")),
                pinned(2, None, None),
            ], "top": [], "counters": [],
        }))
        .unwrap();
        let text = render_status(&st);
        let row = |task: &str| {
            text.lines()
                .find(|l| l.contains(task))
                .unwrap_or_else(|| panic!("no {task} row in\n{text}"))
                .to_owned()
        };
        assert!(text.contains("REQUEST"), "{text}");
        // What the service's span says is shown, its terminal escape escaped.
        assert!(
            row("task 7").contains(
                r"request{method=GET uri=/report\u{1b}[2J} trace=4bf92f3577b34da6a3ce929d0e0e4736"
            ),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "{text}");
        // Outside any span: no REQUEST column.
        let mut st = st;
        st.pinned.retain(|p| p.span.is_none());
        let text = render_status(&st);
        assert!(
            text.contains("WHERE") && !text.contains("REQUEST"),
            "{text}"
        );
    }

    /// Where `status` lists the pins running now, a DELAYED column says who waited behind
    /// each (measured: how many and the longest wait; not measured: how many ran next), its
    /// width bounded whatever the reply says; the victims' words follow the table, escaped.
    /// A status without victims (an older service) has no such column.
    #[test]
    fn status_shows_who_waited_behind_each_pin() {
        let pinned = |id: u64, delayed: serde_json::Value| {
            serde_json::json!({
                "id": id, "for_ms": 1500, "worker": id, "tid": 42, "task_id": id + 6,
                "spawned_at": "src/main.rs:30:5", "reason": "sleep",
                "blocking_operation": "clock_nanosleep", "top_frame": "svc::slow (src/main.rs:16)",
                "held_locks": 0, "delayed": delayed,
            })
        };
        let status = |pinned: Vec<serde_json::Value>| -> Status {
            serde_json::from_value(serde_json::json!({
                "pid": 1, "socket": "/run/x.sock", "command": "svc", "version": "0.1.0",
                "run_id": "r", "uptime_ms": 10, "built_at": "src/main.rs:1",
                "flavor": "multi_thread", "workers": 4, "settings": [], "paused": false,
                "pinned": pinned, "top": [], "counters": [],
            }))
            .unwrap()
        };
        let st = status(vec![
            pinned(
                1,
                serde_json::json!({"measured": true, "tasks": 11, "max_wait_ms": 300.2,
                    "description": "delayed 11 tasks, the longest 300.2 ms: spawned at \
                                    src/api.rs:88:5 in request{uri=/orders\u{1b}[2J}"}),
            ),
            pinned(
                2,
                serde_json::json!({"measured": false, "tasks": 3,
                    "description": "the worker then ran task 12 (not measured: …)"}),
            ),
            pinned(3, serde_json::Value::Null),
            pinned(
                0,
                serde_json::json!({"measured": true, "tasks": usize::MAX, "max_wait_ms": 1e300}),
            ),
        ]);
        let text = render_status(&st);
        let row = |task: &str| {
            text.lines()
                .find(|l| l.contains(task))
                .unwrap_or_else(|| panic!("no {task} row in\n{text}"))
                .to_owned()
        };
        let header = row("WORKER");
        assert!(
            header.contains(" FOR  ") && header.contains(" DELAYED "),
            "{text}"
        );
        let col = header.find("DELAYED").unwrap();
        assert!(
            row("task 7")[col..].starts_with("11 (max 300.2 ms) "),
            "{text}"
        );
        assert!(
            row("task 8")[col..].starts_with("next: 3 (not measured) "),
            "{text}"
        );
        assert!(row("task 9")[col..].starts_with("- "), "{text}");
        // A crafted reply's numbers: the cell stays bounded.
        let cell = row("task 6")[col..].split("  ").next().unwrap().to_owned();
        assert!(cell.chars().count() <= DELAYED_WIDTH, "{cell:?}");
        // The words, after the table, escaped.
        assert!(
            text.contains(
                "  worker 1: delayed 11 tasks, the longest 300.2 ms: spawned at src/api.rs:88:5 \
                 in request{uri=/orders\\u{1b}[2J}\n"
            ),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "{text}");
        // No victims anywhere: no column.
        let text = render_status(&status(vec![pinned(3, serde_json::Value::Null)]));
        assert!(!text.contains("DELAYED"), "{text}");
        assert!(text.contains("WHERE"), "{text}");
    }

    /// `status` shows one line per recording, with its id; from a service older than several
    /// recordings (only `recording`, no ids) it shows that one.
    #[test]
    fn status_shows_every_recording_and_an_older_services_one() {
        let rec = |id: Option<u64>, startup: bool, path: &str| {
            serde_json::json!({
                "id": id, "startup": startup, "started_ms": 1, "path": path, "events": 3,
                "bytes": 4000, "current_size": 4000, "rotations": 0, "write_errors": 0,
                "max_size": null, "max_age_ms": null, "keep": 5,
            })
        };
        let status = |recording: serde_json::Value, recordings: Option<serde_json::Value>| {
            let mut v = serde_json::json!({
                "pid": 1, "socket": "/run/x.sock", "command": "svc", "version": "0.1.0",
                "run_id": "r", "uptime_ms": 10, "built_at": "src/main.rs:1",
                "flavor": "multi_thread", "workers": 2, "settings": [], "paused": false,
                "recording": recording, "pinned": [], "top": [], "counters": [],
            });
            if let Some(r) = recordings {
                v["recordings"] = r;
            }
            serde_json::from_value::<Status>(v).unwrap()
        };
        let both = [
            rec(Some(0), true, "/r/always.jsonl"),
            rec(Some(3), false, "/r/incident.jsonl"),
        ];
        let text = render_status(&status(both[0].clone(), Some(serde_json::json!(both))));
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("recording"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("recording  0 (startup) /r/always.jsonl: 3 events"));
        assert!(lines[1].starts_with("recording  3 /r/incident.jsonl: 3 events"));
        let old = render_status(&status(rec(None, false, "/r/old.jsonl"), None));
        assert!(old.contains("recording  /r/old.jsonl: 3 events"), "{old}");
        let off = render_status(&status(serde_json::Value::Null, None));
        assert!(off.contains("recording  off"), "{off}");
    }

    #[test]
    fn record_stop_takes_an_id_or_a_file() {
        assert_eq!(which_recording("startup"), Ok(Ok(0)));
        assert_eq!(which_recording("12"), Ok(Ok(12)));
        assert_eq!(
            which_recording("/tmp/r.jsonl"),
            Ok(Err(PathBuf::from("/tmp/r.jsonl")))
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(which_recording("./3"), Ok(Err(cwd.join("./3"))));
        assert!(which_recording("99999999999999999999999")
            .unwrap_err()
            .contains("./99999999999999999999999"));
        assert_eq!(which_recording("./-"), Ok(Err(cwd.join("./-"))));
    }
}
