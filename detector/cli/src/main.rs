//! `pinwatch`: read a recording made with `PINWATCH_RECORD`, and control a running service.
//!
//! `pinwatch print FILE` renders each event like `jfr print --events jdk.VirtualThreadPinned`;
//! `pinwatch summary FILE` groups them by top application frame like `jfr view pinned-threads`;
//! `pinwatch profile FILE -o pinned.pb.gz` writes their pinned-time profile, read with
//! `go tool pprof -symbolize=none -top pinned.pb.gz`;
//! `pinwatch ctl list` finds the services with pinwatch, and
//! `pinwatch ctl <pid> status | set | record | dump | report | profile | pause | resume` talks to
//! a running service's control socket like `jcmd <pid> JFR.*`.

mod ctl;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use pinwatch::recording;
use pinwatch::text::Escaped;

#[derive(Parser)]
#[command(
    name = "pinwatch",
    version,
    about = "Read pinwatch recordings (PINWATCH_RECORD files) and control running services"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every event, one block each, stack included (like `jfr print`).
    Print {
        /// The recording (JSON lines); its rotated files (`rec.1.jsonl`, …) are read with it.
        /// `-` reads standard input.
        file: PathBuf,
        /// Print the events as JSON lines instead (one per line, in this version's schema: an older
        /// line is written as this version reads it, with durations in ms to the microsecond).
        #[arg(long)]
        json: bool,
        /// Only the last report of each pinned poll.
        #[arg(long)]
        latest: bool,
    },
    /// Group pinned polls by top application frame: count, longest, total, reasons (like
    /// `jfr view pinned-threads`), sorted by total; then by request (method and route), and who
    /// waited behind the pins (the delayed tasks by where they were spawned).
    Summary {
        /// The recording (JSON lines); its rotated files (`rec.1.jsonl`, …) are read with it.
        /// `-` reads standard input.
        file: PathBuf,
        /// Print every table as one JSON object: `locations` (the rows), `by_request` (with
        /// spans), `who_waited`, and `dumps` (what a flight recording's dump says of itself).
        #[arg(long)]
        json: bool,
    },
    /// Write a recording as one self-contained HTML page: a timeline per worker, hot
    /// locations, a flame graph of the pinned stacks, the reasons. Opens from disk in any
    /// browser; needs no network.
    Report {
        /// The recording (JSON lines); its rotated files (`rec.1.jsonl`, …) are read with it.
        /// `-` reads standard input (then `-o` is needed: there is no file to name the output
        /// after).
        file: PathBuf,
        /// Where to write the page (default: the recording's path with `.html`); `-` is
        /// standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Write a recording's pins as a pinned-time profile in the pprof format (gzipped
    /// `profile.proto`: `pins/count` and `pinned/nanoseconds`, labels `reason`, `request` and
    /// `span`), for Pyroscope, Parca and `go tool pprof` (`go tool pprof -symbolize=none -top
    /// FILE`). The last report of each pin counts; retracted polls count nothing.
    Profile {
        /// The recording (JSON lines); its rotated files (`rec.1.jsonl`, …) are read with it.
        /// `-` reads standard input (then `-o` is needed: there is no file to name the output
        /// after).
        file: PathBuf,
        /// Where to write the profile (default: the recording's path with `.pb.gz`); an
        /// existing file is replaced. `-` is standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Only the pins that ran in the recording's last N seconds (counted back from the end
        /// of its last pin).
        /// At least 1, as `/debug/pprof/pinned?seconds=N` takes it.
        #[arg(long, value_name = "N", value_parser = seconds)]
        seconds: Option<u64>,
    },
    /// Control a running service (like `jcmd <pid> JFR.*`): `ctl list`, `ctl <PID> status`,
    /// `set threshold=50ms`, `record start FILE` / `record list` /
    /// `record stop [ID|FILE]`, `dump FILE`, `report -o PAGE`, `profile -o FILE`, `pause` /
    /// `resume`.
    Ctl(ctl::CtlArgs),
}

fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| ctl::without_target(e).exit());
    let (file, view) = match cli.command {
        Command::Ctl(args) => return ctl::run(&args),
        Command::Print { file, json, latest } => (file, View::Print { json, latest }),
        Command::Summary { file, json } => (file, View::Summary { json }),
        Command::Report { file, output } => {
            let output = output.unwrap_or_else(|| named_after(&file, "html", "report"));
            (file, View::Report { output })
        }
        Command::Profile {
            file,
            output,
            seconds,
        } => {
            let output = output.unwrap_or_else(|| named_after(&file, "pb.gz", "profile"));
            (file, View::Profile { output, seconds })
        }
    };
    let read = if is_dash(&file) {
        read_stdin()
    } else {
        recording::read_recording(&file)
    };
    let rec = match read {
        Ok(r) => r,
        Err(e) => {
            warn(format_args!("{e}"));
            return ExitCode::from(1);
        }
    };
    // Damaged lines (a write cut short, a crash mid-line) are skipped with a warning, and the
    // command succeeds on the events that remain; a file where lines were skipped and no event
    // read fails, saying what it is.
    if let Some(verdict) = rec.no_event_verdict(&shown(&file)) {
        // The verdict first, then what the lines were.
        warn(format_args!("{verdict}"));
        for w in &rec.warnings {
            warn(format_args!("{w}"));
        }
        return ExitCode::from(1);
    }
    for w in &rec.warnings {
        warn(format_args!("warning: {w}"));
    }
    // A flight recording's dump says whose it is and what it lacks: at the head of each view
    // (on stderr for the JSON ones, which stay pure JSON).
    // The first few, then a count: a file of many dump lines (concatenated dumps, or a crafted
    // file) must not bury the view under a line per dump.
    let dumps = rec.describe_dumps();
    let mut named: Vec<String> = dumps
        .iter()
        .take(MAX_DUMPS_NAMED)
        .map(|d| ctl::untrusted(d))
        .collect();
    if dumps.len() > MAX_DUMPS_NAMED {
        named.push(format!(
            "and {} more dumps (the file holds {} dump lines: dumps put one after another)",
            dumps.len() - MAX_DUMPS_NAMED,
            dumps.len()
        ));
    }
    let head: String = named.iter().map(|d| format!("{d}\n")).collect();
    let json_view = matches!(
        view,
        View::Print { json: true, .. } | View::Summary { json: true }
    );
    if json_view {
        for d in &named {
            warn(format_args!("{d}"));
        }
    }
    match view {
        View::Profile { output, seconds } => write_profile(&file, &rec.events, &output, seconds),
        View::Print { json, latest } => {
            let events: Vec<&pinwatch::PinnedEvent> = if latest {
                recording::latest_reports(&rec.events)
            } else {
                rec.events.iter().collect()
            };
            // Written a block at a time: the output of a long recording is not held whole
            // beside its events.
            let mut out = if json { String::new() } else { head };
            for e in events {
                if json {
                    out.push_str(&e.to_json_line());
                } else {
                    recording::print_event(&mut out, e);
                }
                if out.len() >= PRINT_CHUNK {
                    if let Err(code) = write_print(&out, json) {
                        return code;
                    }
                    out.clear();
                }
            }
            write_print(&out, json).err().unwrap_or(ExitCode::SUCCESS)
        }
        View::Report { output } => {
            let mut source = shown(&file);
            if let Some(d) = dumps.first() {
                source = format!("{source} — {d}");
            }
            let page = match pinwatch_cli::report::render(&rec.events, &source, &rec.warnings) {
                Ok(p) => p,
                Err(e) => {
                    warn(format_args!("{e}"));
                    return ExitCode::from(1);
                }
            };
            if let Err(e) = write_output(&file, &output, page.as_bytes()) {
                warn(format_args!("{e}"));
                return ExitCode::from(1);
            }
            let pins = recording::latest_reports(&rec.events).len();
            say_wrote(
                &output,
                &format!(
                    "wrote {} ({}){}\n{head}",
                    output_name(&output),
                    events_and_pins(rec.events.len(), pins),
                    open_it(&output)
                ),
            )
        }
        View::Summary { json } => {
            let rows = recording::summarize(&rec.events);
            let requests = recording::summarize_requests(&rec.events);
            let who = recording::who_waited(&rec.events);
            if json {
                // Every table of the text: the locations, the requests (when any pin has
                // spans), who waited behind the pins, and the dumps' descriptions.
                let all = SummaryJson {
                    locations: &rows,
                    by_request: &requests,
                    who_waited: &who,
                    dumps: &dumps,
                };
                match serde_json::to_string_pretty(&all) {
                    Ok(s) => print_out(&(ctl::json_safe(&s) + "\n")),
                    Err(e) => {
                        warn(format_args!("{e}"));
                        ExitCode::from(1)
                    }
                }
            } else {
                let mut text = head + &recording::render_summary(&rows);
                let requests = recording::render_requests(&requests);
                if !requests.is_empty() {
                    text.push('\n');
                    text.push_str(&requests);
                }
                text.push('\n');
                text.push_str(&recording::render_who_waited(&who));
                print_out(&text)
            }
        }
    }
}

/// Whether a path argument is `-`: standard input for the recording read, standard output
/// for what is written, as for `cat` and `tar -f -` — the descriptor itself, not a path to it
/// (`/dev` and `/proc` may not be there). `./-` is a file named `-`.
pub(crate) fn is_dash(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// How messages name the recording `file`.
fn shown(file: &Path) -> String {
    if is_dash(file) {
        "standard input".to_owned()
    } else {
        Escaped(file.display()).to_string()
    }
}

/// How messages name the output `path`.
pub(crate) fn output_name(path: &Path) -> String {
    if is_dash(path) {
        "standard output".to_owned()
    } else {
        Escaped(path.display()).to_string()
    }
}

/// What descriptor `fd` is open to, as `fstat` says (no path, no `/proc`).
fn descriptor_metadata(fd: i32) -> std::io::Result<std::fs::Metadata> {
    dup_descriptor(fd)?.metadata()
}

/// A duplicate of this process's descriptor `fd` (close-on-exec), to write through or `fstat`
/// and close without closing `fd`; one that is not open is said to be so.
fn dup_descriptor(fd: i32) -> std::io::Result<std::fs::File> {
    // SAFETY: F_DUPFD_CLOEXEC reads and writes no memory of ours; on a descriptor that is not
    // open it fails (EBADF), which is said.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBADF) {
            return Err(std::io::Error::other(format!(
                "descriptor {fd} is not open (give it from the shell: `{fd}> FILE`)"
            )));
        }
        return Err(e);
    }
    // SAFETY: `dup` was just made by fcntl above and nothing else owns or closes it.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(dup) })
}

/// The recording on standard input, read as `cat -` reads it: through descriptor 0, whatever
/// it is open to (a pipe, a socket, a file from its offset on), not reopened by a path. A
/// terminal is refused: nothing would end the read but ^D.
fn read_stdin() -> Result<recording::Recording, recording::ReadError> {
    use std::io::IsTerminal as _;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(recording::ReadError::Io {
            path: shown(Path::new("-")),
            source: std::io::Error::other(
                "it is a terminal; send a recording through a pipe (`zcat rec.jsonl.gz | \
                 pinwatch summary -`) or name its file",
            ),
        });
    }
    recording::read_recording_from(stdin.lock(), &shown(Path::new("-")))
}

/// A usage error of the subcommand `command` (its usage line, status 2): something missing
/// that the parser cannot see is missing.
pub(crate) fn usage_error(command: &str, said: String) -> clap::Error {
    subcommand(command).error(clap::error::ErrorKind::MissingRequiredArgument, said)
}

/// Prints `pinwatch <command> help`.
pub(crate) fn print_help_of(command: &str) {
    let _ = subcommand(command).print_help();
}

/// `command` as the parser has it, built (with its `help`), or the whole CLI when there is no
/// such command.
fn subcommand(command: &str) -> clap::Command {
    use clap::CommandFactory as _;
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand(command).cloned().unwrap_or(cli)
}

/// The default output of `report` and `profile`: the recording's path with `extension`. A
/// recording read from standard input (`-`) or another open descriptor of this process's
/// (`/dev/stdin`, `<(zcat rec.gz)`) has no name to give it (`/dev/stdin.html` would be made in
/// `/dev` for root): the command stops and asks for `-o`. (A descriptor that is not open, a
/// device, is left for the read to refuse, saying why.)
fn named_after(recording: &Path, extension: &str, command: &str) -> PathBuf {
    let descriptor = || own_descriptor(recording).is_some() && std::fs::metadata(recording).is_ok();
    if is_dash(recording) || descriptor() {
        usage_error(
            command,
            format!(
                "the recording is read from {}, which names no file to write beside it; say \
                 where with -o FILE (-o - for standard output)",
                shown(recording)
            ),
        )
        .exit();
    }
    recording.with_extension(extension)
}

/// What a page holds, as `report` and `ctl report` say it: `2 events, 1 pin`.
pub(crate) fn events_and_pins(events: usize, pins: usize) -> String {
    let s = |n: usize| if n == 1 { "" } else { "s" };
    format!("{events} event{}, {pins} pin{}", s(events), s(pins))
}

/// `--seconds N`: a whole number of seconds, at least 1.
pub(crate) fn seconds(v: &str) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1 (a whole number of seconds)".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err("is not a whole number of seconds; write it like `600`".to_owned()),
    }
}

/// How much of `print`'s output is written at a time.
const PRINT_CHUNK: usize = 64 << 10;

/// A piece of `print`'s output ([`write_out`]), made safe for a terminal when it is JSON: JSON
/// lets DEL, C1 (`\u{9b}` is CSI) and the bidi overrides through raw, and a crafted
/// recording's strings would reach the terminal as they are. Pieces are whole lines.
fn write_print(text: &str, json: bool) -> Result<(), ExitCode> {
    if json {
        write_out(&ctl::json_safe(text))
    } else {
        write_out(text)
    }
}

/// Writes `text` to stdout, for every command's output (`print!` would panic on a reader that
/// went away). A reader that closed the pipe (`pinwatch print rec | head`, `less` quit early)
/// has what it wanted: that is no error, and the command stops quietly with status 0
/// (`Err(ExitCode::SUCCESS)`). Another write error is reported; status 1.
pub(crate) fn write_out(text: &str) -> Result<(), ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ExitCode::SUCCESS),
        Err(e) => {
            warn(format_args!("cannot write the output: {e}"));
            Err(ExitCode::from(1))
        }
    }
}

/// [`write_out`] as a command's last step: its exit status.
pub(crate) fn print_out(text: &str) -> ExitCode {
    write_out(text).err().unwrap_or(ExitCode::SUCCESS)
}

/// Says what was written to `output`: on stdout, or on stderr when `output` is written as it
/// is ([`written_as_is`]: `-o /dev/stdout`), whose bytes must not be followed by the message.
pub(crate) fn say_wrote(output: &Path, text: &str) -> ExitCode {
    if written_as_is(output) {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        return ExitCode::SUCCESS;
    }
    print_out(text)
}

/// What `report` and `ctl report` say after a page written to `output`: to open it, where it is
/// a file (also through `/dev/stdout` redirected to one), not a pipe.
pub(crate) fn open_it(output: &Path) -> &'static str {
    if is_dash(output) {
        if descriptor_metadata(1).is_ok_and(|m| m.is_file()) {
            "; open the file it went to in a browser"
        } else {
            ""
        }
    } else if std::fs::metadata(output).is_ok_and(|m| m.is_file()) {
        "; open it in a browser"
    } else {
        ""
    }
}

/// `pinwatch: <msg>` on stderr; never panics (`eprintln!` does when stderr is a closed pipe).
pub(crate) fn warn(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "pinwatch: {msg}");
}

/// `summary --json`: every table of the text summary, in its order.
#[derive(serde::Serialize)]
struct SummaryJson<'a> {
    /// The rows by function and line.
    locations: &'a [recording::SummaryRow],
    /// By request (left out when no pin has spans).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    by_request: &'a [recording::RequestRow],
    /// Who waited behind the completed pins.
    who_waited: &'a recording::WhoWaited,
    /// What each dump in the file says of itself (left out when there is none).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    dumps: &'a [String],
}

/// What to show of a recording.
enum View {
    Print {
        json: bool,
        latest: bool,
    },
    Summary {
        json: bool,
    },
    Report {
        output: PathBuf,
    },
    Profile {
        output: PathBuf,
        seconds: Option<u64>,
    },
}

/// Writes `bytes` (a page, a profile) to `output`, made from the recording `recording`: never
/// over the recording or one of its rotated files; otherwise as [`write_file`] does.
fn write_output(recording: &Path, output: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let out = if is_dash(output) {
        descriptor_metadata(1)
    } else {
        std::fs::metadata(output)
    };
    // Only a file can be written over (one socket as stdin and stdout, as inetd gives, is
    // read whole before anything is written).
    if let Some(out) = out.ok().filter(std::fs::Metadata::is_file) {
        let same = |m: std::io::Result<std::fs::Metadata>| {
            m.is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino())
        };
        // Standard input's file is what its descriptor is open to (`< rec.jsonl`).
        let files = if is_dash(recording) {
            same(descriptor_metadata(0))
                .then(|| shown(recording))
                .into_iter()
                .collect()
        } else {
            let files = recording::recording_files(recording).unwrap_or_default();
            files
                .iter()
                .filter(|f| same(std::fs::metadata(f)))
                .map(|f| shown(f))
                .collect::<Vec<_>>()
        };
        if let Some(f) = files.first() {
            return Err(format!(
                "{} is the recording {f}: name another file with -o",
                output_name(output),
            ));
        }
    }
    write_file(output, true, |f| f.write_all(bytes))
        .map_err(|e| format!("cannot write {}: {e}", output_name(output)))
}

/// Writes what `fill` writes to `path`:
/// - one of this process's descriptors (`/dev/stdout`, `-o -`, `/dev/fd/N`, `/proc/self/fd/N`:
///   `own_descriptor`) is written through as it is, as `cat` writes to its stdout, whatever it
///   is open to (a file the shell redirected stdout to, a pipe, a socket) but a terminal
///   (`check_opened`);
/// - so is `/dev/null`, or a pipe or FIFO of this user's, named by its path;
/// - a regular file (or nothing yet) is made whole or not at all, replacing one that is there
///   only when `replace` ([`write_whole_file`]: a temporary file beside it, then linked or
///   renamed into place; a symlink there is replaced, not written through). A FIFO of another
///   user's is not written into (it could be read by them): it is replaced like a file, which a
///   sticky `/tmp` refuses;
/// - a block device or a socket named by its path is refused.
///
/// A symlink on the way that another user made in a directory anyone may write to is never
/// followed ([`planted_symlinks`]).
///
/// [`write_whole_file`]: pinwatch::files::write_whole_file
/// [`planted_symlinks`]: pinwatch::files::planted_symlinks
pub(crate) fn write_file(
    path: &Path,
    replace: bool,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt as _;
    let own = if is_dash(path) {
        Some(1)
    } else {
        // Before anything is followed (a device or a descriptor of ours behind another user's
        // link in /tmp would be written through): as the kernel's fs.protected_symlinks.
        pinwatch::files::planted_symlinks(path)?;
        own_descriptor(path)
    };
    if let Some(fd) = own {
        // Written through as `cat` writes to its stdout, whatever the shell or the parent
        // opened it to (a file, a pipe, a socket); only a terminal is refused.
        let mut f = dup_descriptor(fd)?;
        check_opened(&f, true)?;
        return fill_stream(&mut f, fill);
    }
    if let Ok(m) = std::fs::metadata(path) {
        if m.file_type().is_block_device() {
            return Err(std::io::Error::other("it is a block device; name a file"));
        }
        if m.file_type().is_socket() {
            // open() of a socket's path fails with ENXIO ("No such device or address").
            return Err(std::io::Error::other(
                "it is a socket, which cannot be opened to write to; name a file",
            ));
        }
        if is_stream(&m) {
            // Opened where the walk above looked: a link that appears after it is not followed.
            let mut f = pinwatch::files::open_unplanted(path, libc::O_WRONLY, 0)?.file;
            check_opened(&f, false)?;
            return fill_stream(&mut f, fill);
        }
    }
    pinwatch::files::write_whole_file(path, replace, fill)
}

/// `fill` on a stream `f` (a pipe, `/dev/stdout`): where a write into it failed because the
/// reader closed its end (`EPIPE`: `pinwatch report rec -o /dev/stdout | head`), the reader has
/// what it wanted and the command ends quietly, status 0, as `print` does. Any other failure —
/// the service's refusal or death during a dump, a full disk — is the command's to report,
/// whether or not the reader is still there.
fn fill_stream(
    f: &mut std::fs::File,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let filled = fill(f);
    if filled
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    {
        std::process::exit(0);
    }
    filled
}

/// Whether [`write_file`] writes to `path` as it is, with nothing to replace (no `--force`
/// needed, and the 'wrote' line goes to stderr): one of this process's descriptors
/// (`own_descriptor`: `/dev/stdout`, whatever it is open to), or a stream ([`is_stream`]).
pub(crate) fn written_as_is(path: &Path) -> bool {
    is_dash(path)
        || own_descriptor(path).is_some()
        || std::fs::metadata(path).is_ok_and(|m| is_stream(&m))
}

/// Symlinks followed at most by [`own_descriptor`] (the kernel's own limit is 40).
const DESCRIPTOR_LINKS: usize = 8;

/// The descriptor `path` names, if it is one of this process's: `/dev/fd/N`,
/// `/proc/self/fd/N`, `/proc/thread-self/fd/N` or `/proc/PID/fd/N` (ours), named directly or
/// through symlinks (`/dev/stdout`). What such a descriptor is open to is written through it
/// as it is, even a regular file (`> out.html`): that file is the shell's redirection, at the
/// descriptor's offset (`>>` appends), not one to replace by a temporary file renamed over
/// the path (over `/dev/stdout` itself, for root).
fn own_descriptor(path: &Path) -> Option<i32> {
    let ours = PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    let dirs = [
        Path::new("/dev/fd"),
        Path::new("/proc/self/fd"),
        Path::new("/proc/thread-self/fd"),
        ours.as_path(),
    ];
    let mut p = path.to_path_buf();
    for _ in 0..=DESCRIPTOR_LINKS {
        // Each link read here too is one the walk allows: one planted since `write_file`'s
        // walk is not taken for one of ours.
        pinwatch::files::planted_symlinks(&p).ok()?;
        if p.parent().is_some_and(|d| dirs.contains(&d)) {
            if let Some(fd) = p.file_name().and_then(|n| n.to_str()?.parse::<i32>().ok()) {
                return Some(fd);
            }
        }
        // A descriptor's own link (`/proc/self/fd/1` -> `/tmp/out.html`) was matched above,
        // before it is read.
        let target = std::fs::read_link(&p).ok()?;
        p = match p.parent() {
            Some(dir) => dir.join(target),
            None => target,
        };
    }
    None
}

/// Whether what is at a path ([`std::fs::metadata`]: through symlinks) is a terminal, a
/// device such as `/dev/null`, or a pipe or FIFO of this user's: [`write_file`] writes
/// to it as it is, there is no file to replace (no `--force` needed).
pub(crate) fn is_stream(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let t = m.file_type();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let ours = m.uid() == unsafe { libc::geteuid() };
    t.is_char_device() || (t.is_fifo() && ours)
}

/// Why a terminal is not written to (no `| less` in it: a profile is gzip, helper-93).
pub(crate) const TERMINAL_REFUSED: &str = "it is a terminal; send it through a pipe or name a file";

/// Refuses a terminal (`fill` writes a page, a profile or a service's dump, never for a
/// terminal: the dump's bytes come from the service as they are) and, once opened, anything
/// that is no longer a stream of this user's (a FIFO swapped in after it was looked at).
fn check_opened(f: &std::fs::File, own: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: isatty only reads the descriptor number, which `f` keeps open.
    if unsafe { libc::isatty(f.as_raw_fd()) } == 1 {
        return Err(std::io::Error::other(TERMINAL_REFUSED));
    }
    if !own && !is_stream(&f.metadata()?) {
        return Err(std::io::Error::other(
            "it changed as it was opened (no longer a pipe or device of yours); name a file",
        ));
    }
    Ok(())
}

/// How `profile` and `ctl profile` say to read what they wrote (followed by the file). The
/// profile has no addresses, so there is nothing to symbolize; without `-symbolize=none`,
/// `go tool pprof` tries to anyway (docs/profiling.md).
pub(crate) const PPROF_READ: &str = "go tool pprof -symbolize=none -top";

/// Dumps named at the head of `print`, `summary` and `report`; more are counted.
const MAX_DUMPS_NAMED: usize = 3;

/// `pinwatch profile`: the pprof profile of `events` (of the recording `file`) written to
/// `output`, replaced whole (written beside it, then renamed over it).
fn write_profile(
    file: &std::path::Path,
    events: &[pinwatch::PinnedEvent],
    output: &std::path::Path,
    seconds: Option<u64>,
) -> ExitCode {
    use pinwatch::profile;
    let fail = |msg: std::fmt::Arguments<'_>| {
        warn(msg);
        ExitCode::from(1)
    };
    // The end of the recording: the latest end of a pin in it.
    let end = events
        .iter()
        .filter_map(|e| e.start.checked_add(e.duration))
        .max();
    let mut options = profile::Options::default();
    if let (Some(n), Some(end)) = (seconds, end) {
        options = options.since(
            end.checked_sub(std::time::Duration::from_secs(n))
                .unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        );
    }
    let built = profile::build(events, &options);
    let pins: i64 = built.sample.iter().map(|s| s.value[0]).sum();
    let nanos: i64 = built
        .sample
        .iter()
        .fold(0i64, |t, s| t.saturating_add(s.value[1]));
    if pins == 0 {
        let what = match seconds {
            _ if events.is_empty() => "holds no pins".to_owned(),
            Some(n) => format!(
                "holds only retracted polls (block_in_place, which did not pin) in its last {n} s"
            ),
            None => "holds only retracted polls (block_in_place, which did not pin)".to_owned(),
        };
        return fail(format_args!("{} {what}: no profile written", shown(file)));
    }
    let bytes = profile::encode(&built);
    if let Err(e) = write_output(file, output, &bytes) {
        return fail(format_args!("{e}"));
    }
    say_profile_written(output, pins, nanos, built.sample.len())
}

/// What `profile` and `ctl profile` say once the profile is written: how much it holds, and how
/// to read it (not for a pipe or `/dev/stdout`, which is no file to read again).
pub(crate) fn say_profile_written(
    output: &Path,
    pins: i64,
    nanos: i64,
    samples: usize,
) -> ExitCode {
    let read = if written_as_is(output) {
        String::new()
    } else {
        format!("; read it with: {PPROF_READ} {}", Escaped(output.display()))
    };
    say_wrote(
        output,
        &format!(
            "wrote {} ({pins} pin{}, {} pinned, {samples} profile sample{}){read}\n",
            output_name(output),
            if pins == 1 { "" } else { "s" },
            pinwatch::recording::human_ms(nanos as f64 / 1e6),
            if samples == 1 { "" } else { "s" },
        ),
    )
}
