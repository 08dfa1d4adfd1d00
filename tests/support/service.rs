//! `pin_service --quiet --commands` as a test's service: pins made on request (`pin 100ms`,
//! `hold`, `release`, `storm N D`), its answers read line by line, bounded waits.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{wait_for, Proc};

/// How long a step may take on a loaded machine.
const LONG: Duration = Duration::from_secs(60);

/// `pin_service --quiet --commands`: pins made on request, its answers read line by line.
pub struct Service {
    pub proc: Proc,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    pub pid: u32,
}

impl Service {
    pub fn start(envs: &[(&str, &str)]) -> Service {
        Service::start_as(Command::new(env!("CARGO_BIN_EXE_pin_service")), envs)
    }

    /// `cmd` (a `pin_service`, maybe a copy of it run as another user).
    pub fn start_as(mut cmd: Command, envs: &[(&str, &str)]) -> Service {
        cmd.args(["--quiet", "--commands"])
            .env("PINWATCH_TRACING", "off")
            .env_remove("PINWATCH")
            .env_remove("PINWATCH_THRESHOLD")
            .env_remove("PINWATCH_CONTROL")
            .env_remove("PINWATCH_RECORD")
            .env_remove("PINWATCH_FLIGHT_SIZE")
            .env_remove("PINWATCH_DUMP_ON_EXIT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child: Child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let pid = child.id();
        let mut s = Service {
            proc: Proc {
                child,
                name: "pin_service".into(),
            },
            stdin,
            lines,
            pid,
        };
        s.expect("pin_service: running");
        s
    }

    pub fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits (bounded) for an output line starting with `prefix`.
    pub fn expect(&mut self, prefix: &str) {
        loop {
            match self.lines.recv_timeout(LONG) {
                Ok(l) if l.starts_with(prefix) => return,
                Ok(_) => continue,
                Err(e) => panic!("pin_service never said {prefix:?}: {e}"),
            }
        }
    }

    /// `command`, then waits for `done`.
    pub fn pin(&mut self, command: &str, done: &str) {
        self.send(command);
        self.expect(done);
    }

    /// Ends its stdin: it stops, and its detector with it.
    pub fn finish(&mut self) {
        drop(self.stdin.take());
        let status = wait_for("pin_service to exit", LONG, || {
            self.proc.child.try_wait().unwrap()
        });
        assert!(status.success(), "{status:?}");
    }

    /// Its resident set size, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }
}
