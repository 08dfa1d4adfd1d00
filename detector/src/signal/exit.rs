//! SIGTERM and SIGINT for `PINWATCH_DUMP_ON_EXIT`: a service that does not shut down
//! gracefully dies of them without ever dropping its runtime, so the dump is written at the
//! signal, then the process dies of it as it would have.
//!
//! [`arm`] installs [`exit_handler`] for each of the two signals
//! whose action is the default one — never over a handler the service installed, never over
//! `SIG_IGN` — and starts, once per process, the exit signals' thread, which blocks in `read` on
//! a pipe (no CPU while it waits). The handler writes the signal's number to the pipe; the thread
//! calls the callback given to [`arm`] (the runtime's: it writes every detector's dump, bounded
//! in time), then asks [`after_dump`] what to do: while pinwatch's handler is still the
//! installed one, nobody wanted the signal but the default action, so the thread puts the
//! default back and raises the signal again; if a handler was installed after pinwatch's (tokio's
//! `signal`, through `signal-hook-registry`, calls the one it replaced), the service handles the
//! signal itself and pinwatch leaves it alone. [`disarm`] puts the default back when the last
//! detector stops, if pinwatch's handler is still the installed one.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock, PoisonError};

use super::handler::{
    default_and_raise, exit_handler, installed, is_exit_handler, EXIT_PENDING, EXIT_PID, EXIT_PIPE,
};

/// The signals pinwatch dumps at, with their names.
pub(crate) const EXIT_SIGNALS: [(libc::c_int, &str); 2] =
    [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")];

/// What [`arm`] found for one exit signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// pinwatch's handler is installed: the dump is written at the signal.
    Caught,
    /// The service ignores the signal (`SIG_IGN`, as a background job of a shell ignores
    /// SIGINT): left so.
    Ignored,
    /// Another handler was installed before pinwatch's: left alone; the dump is written at the
    /// detector's stop only.
    Handled,
}

/// What to do about an installed action `installed` (a `sa_sigaction` value) at [`arm`]: take
/// the signal over (only from the default action), or leave it be.
pub(crate) fn take_over(installed: usize) -> Option<Disposition> {
    match installed {
        libc::SIG_DFL => None,
        libc::SIG_IGN => Some(Disposition::Ignored),
        h if is_exit_handler(h) => Some(Disposition::Caught),
        _ => Some(Disposition::Handled),
    }
}

/// What the exit signals' thread does once the dumps are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterDump {
    /// Put the default action back and raise the signal: the process dies of it.
    Die,
    /// Leave the signal to the handler installed after pinwatch's (the service's graceful
    /// shutdown), or to `SIG_IGN` set since.
    LeaveToService,
}

/// [`AfterDump`] for the action installed now: pinwatch's own handler, or the default action
/// (the last detector stopped and put it back while the dump was written), mean that nobody
/// asked for anything but the default action, which ends the process; anything else was
/// installed after pinwatch's handler and decides.
pub(crate) fn after_dump(installed: usize) -> AfterDump {
    if installed == libc::SIG_DFL || is_exit_handler(installed) {
        AfterDump::Die
    } else {
        AfterDump::LeaveToService
    }
}

struct Armed {
    /// Whether pinwatch's handler is installed for each of [`EXIT_SIGNALS`] (or was, and a
    /// handler installed after it may still call it).
    caught: [bool; 2],
    /// The thread is running and the pipe is made.
    started: bool,
}

static ARMED: Mutex<Armed> = Mutex::new(Armed {
    caught: [false; 2],
    started: false,
});

/// What the exit signals' thread calls with the signal: the runtime's dumps.
static ON_SIGNAL: OnceLock<fn(libc::c_int)> = OnceLock::new();

/// Installs the exit handler for each of [`EXIT_SIGNALS`] whose action is the default one, and
/// starts the exit signals' thread once; `on_signal` is called on that thread with each signal
/// (the first `arm` sets it). Returns each signal's disposition, or why none could be caught
/// (the pipe or the thread could not be made).
pub(crate) fn arm(on_signal: fn(libc::c_int)) -> Result<[Disposition; 2], String> {
    let mut armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
    ON_SIGNAL.get_or_init(|| on_signal);
    if !armed.started {
        start_thread()?;
        armed.started = true;
    }
    let mut out = [Disposition::Handled; 2];
    for (i, (sig, _)) in EXIT_SIGNALS.iter().enumerate() {
        out[i] = if armed.caught[i] {
            Disposition::Caught
        } else {
            match take_over(installed(*sig)) {
                Some(d) => d,
                None => {
                    install(*sig)?;
                    armed.caught[i] = true;
                    Disposition::Caught
                }
            }
        };
    }
    Ok(out)
}

/// Puts the default action back for each exit signal whose installed handler is still
/// pinwatch's (when the last detector with a dump on exit stops). One a handler was installed
/// over is left alone: that handler may call pinwatch's, which then only wakes the thread.
pub(crate) fn disarm() {
    let mut armed = ARMED.lock().unwrap_or_else(PoisonError::into_inner);
    for (i, (sig, _)) in EXIT_SIGNALS.iter().enumerate() {
        if armed.caught[i] && is_exit_handler(installed(*sig)) {
            set_default(*sig);
            armed.caught[i] = false;
        }
    }
}

fn install(sig: libc::c_int) -> Result<(), String> {
    // SAFETY: `exit_handler` is async-signal-safe (see its comment).
    unsafe { super::install_siginfo(sig, exit_handler) }
}

fn set_default(sig: libc::c_int) {
    // SAFETY: a zeroed sigaction is SIG_DFL with no flags and an empty mask.
    let action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs the default action; no handler of ours runs because of it.
    unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) };
}

/// Makes the exit pipe (close-on-exec; its write end non-blocking, for the handler) and the
/// thread that reads it.
fn start_thread() -> Result<(), String> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!(
            "cannot make a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    let [read_end, write_end] = fds;
    // SAFETY: `write_end` is the pipe's, just made; F_SETFL only changes its flags.
    unsafe { libc::fcntl(write_end, libc::F_SETFL, libc::O_NONBLOCK) };
    let spawned = std::thread::Builder::new()
        .name("pinwatch-exit".into())
        .spawn(move || wait_for_signals(read_end));
    if let Err(e) = spawned {
        // SAFETY: both ends are ours and nothing else has them.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        return Err(format!("cannot start the exit signals' thread: {e}"));
    }
    // SAFETY: getpid has no preconditions.
    EXIT_PID.store(unsafe { libc::getpid() }, Ordering::Relaxed);
    EXIT_PIPE.store(write_end, Ordering::Release);
    Ok(())
}

/// The exit signals' thread: blocks in `read` on the pipe until a signal's number comes.
fn wait_for_signals(read_end: libc::c_int) {
    // The signals stay blocked here: this thread never takes one (a service that waits for
    // them with `sigwait` on its own thread keeps them), until it raises one to die of it.
    let set = exit_set();
    // SAFETY: `set` is a valid sigset_t; this changes this thread's mask only.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    loop {
        let mut byte = 0u8;
        // SAFETY: `read_end` is the pipe's read end, open for the life of the process; `byte`
        // is one writable byte.
        let n = unsafe { libc::read(read_end, &mut byte as *mut u8 as *mut libc::c_void, 1) };
        if n == 1 {
            handle(libc::c_int::from(byte));
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {
            continue;
        } else {
            return;
        }
    }
}

/// A signal came: the dumps, then die of it or leave it to the service.
fn handle(sig: libc::c_int) {
    if let Some(on_signal) = ON_SIGNAL.get() {
        on_signal(sig);
    }
    match after_dump(installed(sig)) {
        AfterDump::Die => die_of(sig),
        AfterDump::LeaveToService => EXIT_PENDING.store(0, Ordering::Release),
    }
}

/// Ends the process by `sig`, with its default action, as it would have without pinwatch (a
/// shell sees 128 + the signal's number).
fn die_of(sig: libc::c_int) -> ! {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned here.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
    }
    // SAFETY: unblocks `sig` on this thread only, after the default action is back: the
    // raised signal is delivered here and ends the process.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    default_and_raise(sig);
    // Not reached: the default action of SIGTERM and SIGINT ends the process. Should it not,
    // the exit status says the same.
    // SAFETY: _exit ends the process at once.
    unsafe { libc::_exit(128 + sig) }
}

/// The set of [`EXIT_SIGNALS`].
fn exit_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned here.
    unsafe {
        libc::sigemptyset(&mut set);
        for (sig, _) in EXIT_SIGNALS {
            libc::sigaddset(&mut set, sig);
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_default_action_is_taken_over() {
        let ours = exit_handler as *const () as usize;
        let theirs = only_the_default_action_is_taken_over as *const () as usize;
        assert_eq!(take_over(libc::SIG_DFL), None);
        assert_eq!(take_over(libc::SIG_IGN), Some(Disposition::Ignored));
        assert_eq!(take_over(theirs), Some(Disposition::Handled));
        assert_eq!(take_over(ours), Some(Disposition::Caught));
    }

    #[test]
    fn the_process_dies_only_while_nobody_else_handles_the_signal() {
        let ours = exit_handler as *const () as usize;
        let theirs =
            the_process_dies_only_while_nobody_else_handles_the_signal as *const () as usize;
        // Nobody installed a handler after pinwatch's: the default action ends the process.
        assert_eq!(after_dump(ours), AfterDump::Die);
        // The last detector stopped and put the default back meanwhile: the same.
        assert_eq!(after_dump(libc::SIG_DFL), AfterDump::Die);
        // tokio::signal / signal-hook installed theirs after pinwatch's: their shutdown.
        assert_eq!(after_dump(theirs), AfterDump::LeaveToService);
        // Ignored since: ignored.
        assert_eq!(after_dump(libc::SIG_IGN), AfterDump::LeaveToService);
    }
}
