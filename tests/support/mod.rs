//! The end-to-end tests' harness: child processes that die with the test, free loopback ports,
//! and real servers (Prometheus, Alertmanager) started from Debian's packages, which `.ci/run`
//! installs. A missing server binary fails the test that needs it: nothing is skipped.
#![allow(dead_code)]

pub mod service;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the program `bin` with `env` (its control socket off, its stdout dropped), which is to
/// stop at start-up with a usage error, status 2 (a setting it refuses); its stderr.
pub fn start_up_error(bin: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(bin)
        .env("PINWATCH_CONTROL", "off")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

/// A free TCP port on 127.0.0.1 (the OS picks it; the listener is closed again).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into()
}

/// GET `url`: status and body.
pub fn get(url: &str, timeout: Duration) -> Result<(u16, String), String> {
    let mut r = agent(timeout).get(url).call().map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, body))
}

/// Calls `f` until it returns `Some`, at most `timeout` long; panics with `what` otherwise.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A server binary from the system, with a message saying how to get it when it is missing.
pub fn system_binary(name: &str, package: &str) -> PathBuf {
    let path = Path::new("/usr/bin").join(name);
    assert!(
        path.exists(),
        "{} is missing: install Debian's `{package}` package (`.ci/run` does)",
        path.display()
    );
    path
}

/// `pin_service` (a sample app that pins its workers) with its Prometheus endpoint on a free
/// port; returns once `/metrics` answers.
pub fn pin_service(args: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_pin_service"))
        .args(args)
        .env("PINWATCH_PROMETHEUS_ADDR", format!("127.0.0.1:{port}"))
        .env("PINWATCH_TRACING", "off")
        .env_remove("PINWATCH")
        .env_remove("PINWATCH_THRESHOLD")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc {
        child,
        name: "pin_service".into(),
    };
    let url = format!("http://127.0.0.1:{port}/metrics");
    wait_for("pin_service's /metrics", Duration::from_secs(60), || {
        get(&url, Duration::from_secs(2))
            .ok()
            .filter(|(s, _)| *s == 200)
    });
    (proc, port)
}

/// The value of the sample `name` (labels included, as in the text format) in `metrics`.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A real Prometheus on a free loopback port, with its own data directory.
pub struct Prometheus {
    pub port: u16,
    pub dir: tempfile::TempDir,
    _proc: Proc,
}

impl Prometheus {
    /// Starts Prometheus with `config` (YAML) and the files `extra` (name, text) beside it;
    /// returns once it is ready.
    pub fn start(config: &str, extra: &[(&str, &str)]) -> Prometheus {
        let bin = system_binary("prometheus", "prometheus");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        for (name, text) in extra {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let port = free_port();
        let proc = start_server(
            "prometheus",
            &bin,
            &[
                format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ),
                format!("--storage.tsdb.path={}", dir.path().join("data").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ],
            &dir.path().join("prometheus.log"),
            port,
        );
        Prometheus {
            port,
            dir,
            _proc: proc,
        }
    }

    /// An instant query; the `data` of a successful answer.
    pub fn query(&self, expr: &str) -> Result<serde_json::Value, String> {
        let mut r = agent(Duration::from_secs(10))
            .get(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .query("query", expr)
            .call()
            .map_err(|e| e.to_string())?;
        let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{expr}: {body}"));
        }
        Ok(v["data"].clone())
    }

    /// `GET /api/v1/<path>`'s `data`.
    pub fn api(&self, path: &str) -> serde_json::Value {
        let (_, body) = get(
            &format!("http://127.0.0.1:{}/api/v1/{path}", self.port),
            Duration::from_secs(10),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"].clone()
    }

    /// Prometheus' own log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

/// The repository's root folder.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Starts a server binary with `args`, its output to `log`, and waits (bounded) until
/// `http://127.0.0.1:{port}/-/ready` answers 200, as Prometheus and Alertmanager do.
pub fn start_server(name: &str, bin: &Path, args: &[String], log: &Path, port: u16) -> Proc {
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let proc = Proc {
        child,
        name: name.into(),
    };
    let ready = format!("http://127.0.0.1:{port}/-/ready");
    wait_for(
        &format!("{name} to be ready"),
        Duration::from_secs(60),
        || {
            get(&ready, Duration::from_secs(2))
                .ok()
                .filter(|(s, _)| *s == 200)
        },
    );
    proc
}

/// Runs a Python 3 script (the YAML checks use PyYAML, which `.ci/run` installs); fails the
/// test with its standard error if it fails.
pub fn python(script: &str) {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `pinwatch` CLI, built once per test binary with the same cargo, profile and target
/// directory as the tests (it is another package's binary, so cargo does not hand its path
/// to this one's tests).
pub fn pinwatch_cli() -> PathBuf {
    static CLI: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CLI.get_or_init(|| {
        let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args([
                "build",
                "--locked",
                "-p",
                "pinwatch-cli",
                "--bin",
                "pinwatch",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(repo())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(out.status.success(), "building the pinwatch CLI failed");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "pinwatch")
            .find_map(|v| v["executable"].as_str().map(PathBuf::from))
            .expect("cargo named no pinwatch executable")
    })
    .clone()
}

/// An OTLP/HTTP receiver on loopback: every `POST` body goes to `take(path, body)`, which
/// decodes it (protobuf) and says whether it was an export it knows; answered 200 with an
/// empty protobuf body, or 400. Returns the port.
pub fn otlp_http_receiver(take: impl Fn(&str, &[u8]) -> bool + Send + 'static) -> u16 {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let port = server.server_addr().to_ip().unwrap().port();
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = Vec::new();
            let _ = req.as_reader().read_to_end(&mut body);
            let response = if take(req.url(), &body) {
                tiny_http::Response::from_data(Vec::new()).with_header(
                    tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/x-protobuf"[..],
                    )
                    .unwrap(),
                )
            } else {
                tiny_http::Response::from_data(Vec::new()).with_status_code(400)
            };
            let _ = req.respond(response);
        }
    });
    port
}

/// Counter `name` of a `pinwatch ctl PID status --json` reply.
pub fn counter(st: &serde_json::Value, name: &str) -> u64 {
    st["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[0] == name)
        .unwrap_or_else(|| panic!("no counter {name} in {st}"))[1]
        .as_u64()
        .unwrap()
}
