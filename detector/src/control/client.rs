//! The client side of the control socket, for `pinwatch ctl`: finding services and asking them.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::protocol::{Reply, Request};

/// A control socket found in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Endpoint {
    /// The process.
    pub pid: u32,
    /// How `pinwatch ctl` names it: `<pid>`, or `<pid>.<n>` for a process's n-th detector.
    pub name: String,
    /// The socket.
    pub path: PathBuf,
}

/// `<pid>.sock` → `(pid, "<pid>")`; `<pid>.<n>.sock` → `(pid, "<pid>.<n>")`.
pub fn parse_socket_name(file: &str) -> Option<(u32, String)> {
    let name = file.strip_suffix(".sock")?;
    let (pid, n) = match name.split_once('.') {
        Some((pid, n)) => (pid, Some(n)),
        None => (name, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || n.is_some_and(|n| !digits(n)) {
        return None;
    }
    Some((pid.parse().ok()?, name.to_owned()))
}

/// Where to look for control sockets: the directory `PINWATCH_CONTROL` names, else this user's
/// default one; for root also every user's default directory.
pub fn search_dirs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("PINWATCH_CONTROL").map(PathBuf::from) {
        if dir.is_absolute() {
            return vec![dir];
        }
    }
    let mine = super::default_dir();
    let mut dirs = vec![mine.clone()];
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } == 0 {
        if let Ok(entries) = std::fs::read_dir("/tmp") {
            let mut others: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("pinwatch-"))
                        && *p != mine
                        && p.is_dir()
                })
                .collect();
            others.sort();
            dirs.extend(others);
        }
    }
    dirs
}

/// The control sockets in `dirs`, by pid.
pub fn endpoints(dirs: &[PathBuf]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            if let Some((pid, name)) = file.to_str().and_then(parse_socket_name) {
                out.push(Endpoint {
                    pid,
                    name,
                    path: entry.path(),
                });
            }
        }
    }
    out.sort_by(|a, b| (a.pid, &a.name).cmp(&(b.pid, &b.name)));
    out
}

/// The socket `target` names: a path (it has a `/`), or `<pid>` / `<pid>.<n>` in `dirs`.
pub fn find(target: &str, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    if target.contains('/') {
        return Ok(PathBuf::from(target));
    }
    if parse_socket_name(&format!("{target}.sock")).is_none() {
        return Err(format!(
            "{target:?} is not a process id; give a pid (`pinwatch ctl list` shows them), \
             `<pid>.<n>` for a process's n-th runtime, or a socket's path"
        ));
    }
    let file = format!("{target}.sock");
    for dir in dirs {
        let path = dir.join(&file);
        if path.exists() {
            return Ok(path);
        }
    }
    let pid = target.split('.').next().unwrap_or(target);
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(if alive {
        format!(
            "process {pid} has no pinwatch control socket {file} in {}: it runs without \
             pinwatch, with PINWATCH_CONTROL=off or a directory of its own (then set \
             PINWATCH_CONTROL to that directory here too), or as another user (run as that user \
             or as root)",
            looked.join(", ")
        )
    } else {
        format!("no process {pid}")
    })
}

/// Sends `request` to the socket at `path` and reads the reply, waiting at most `timeout` for
/// each step.
pub fn request(path: &Path, request: &Request, timeout: Duration) -> Result<Reply, String> {
    let mut stream = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => format!(
            "{}: nobody listens there (the process is gone or has stopped its detector): {e}",
            path.display()
        ),
        std::io::ErrorKind::PermissionDenied => format!(
            "{}: permission denied: the socket belongs to another user; run as that user or as \
             root",
            path.display()
        ),
        _ => format!("cannot connect to {}: {e}", path.display()),
    })?;
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    line.push('\n');
    // A service that refuses a client answers before reading: then the send fails (the
    // service has closed), but its answer is there to read.
    let sent = stream.write_all(line.as_bytes());
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    if let Ok(reply) = serde_json::from_str::<Reply>(answer.trim()) {
        return Ok(reply);
    }
    if let Err(e) = sent {
        return Err(format!(
            "cannot send the request to {}: {e}",
            path.display()
        ));
    }
    if let Err(e) = read {
        return Err(format!(
            "no answer from {} within {timeout:?}: {e}",
            path.display()
        ));
    }
    Err(format!(
        "{} answered something that is not a pinwatch reply: {:?}",
        path.display(),
        answer.chars().take(200).collect::<String>()
    ))
}

/// Whether the socket at `path` is left over: nobody listens on it.
pub fn is_stale(path: &Path) -> bool {
    matches!(
        UnixStream::connect(path),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names() {
        assert_eq!(parse_socket_name("123.sock"), Some((123, "123".into())));
        assert_eq!(parse_socket_name("123.2.sock"), Some((123, "123.2".into())));
        for bad in [
            "x.sock",
            "123",
            "123..sock",
            "12a.sock",
            ".sock",
            "1.2.3.sock",
        ] {
            assert_eq!(parse_socket_name(bad), None, "{bad}");
        }
    }
}
