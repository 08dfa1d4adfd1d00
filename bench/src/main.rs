//! pinwatch side by side with the tools users would pick instead.
//!
//! `cargo run --release -p pinwatch-bench --bin compare` runs every configuration on every
//! workload, round by round (the configurations' order rotates each round), each measurement in
//! a child process of its own, and prints one table: medians, and the median of per-round
//! ratios to plain tokio. It never fails on a timing; it only prints.
//!
//! The configurations that need tokio's `tracing` feature (console-subscriber, tokio-blocked)
//! run from a second build of this program with the `tracing-tools` feature, which the driver
//! makes first (`target/bench-tracing`): that feature costs every poll, so the others run from
//! a build without it, as a service that does not use those tools would be built.
//!
//! The first-pin workload also runs, for the configurations that report a stuck worker, from a
//! debug build (the dev profile, as `cargo build -p pinwatch-bench` makes it), which the driver
//! builds too, into the usual target directory (`target/debug/compare`); `--debug-exe PATH`
//! takes one already built, `--no-debug` leaves the debug column out.
//!
//! Options: `--rounds N` (15), `--tasks N` (200000), `--http-secs S` (2), `--rate N` (4000
//! requests/s), `--conns N` (16), `--idle-secs S` (10: the idle window), `--configs a,b,…`,
//! `--workloads a,b,…` (storm, http, mixed, stuck, idle, first-pin, stall, busy), `--debug-exe PATH`,
//! `--no-debug`, `--quick` (3 rounds, small sizes, a 2 s idle window: a smoke run).

mod child;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use child::{Config, Sizes, Workload};

struct Args {
    rounds: usize,
    sizes: Sizes,
    configs: Vec<Config>,
    workloads: Vec<Workload>,
    /// The debug build the first-pin workload also runs from, if given.
    debug_exe: Option<std::path::PathBuf>,
    /// No debug column.
    no_debug: bool,
    /// `child CONFIG WORKLOAD`: one measurement.
    child: Option<(Config, Workload)>,
}

fn fail(msg: String) -> ! {
    eprintln!("compare: {msg}");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut a = Args {
        rounds: 15,
        sizes: Sizes {
            tasks: 200_000,
            http: Duration::from_secs(2),
            rate: 4000,
            conns: 16,
            idle: Duration::from_secs(10),
        },
        configs: Config::ALL.to_vec(),
        workloads: Workload::ALL.to_vec(),
        debug_exe: None,
        no_debug: false,
        child: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    let num = |flag: &str, v: Option<&String>| -> f64 {
        let v = v.unwrap_or_else(|| fail(format!("{flag} needs a value")));
        v.parse()
            .ok()
            .filter(|n: &f64| *n > 0.0)
            .unwrap_or_else(|| fail(format!("{flag} {v:?}: give a positive number")))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--rounds" => a.rounds = num(arg, it.next()) as usize,
            "--tasks" => a.sizes.tasks = num(arg, it.next()) as usize,
            "--http-secs" => a.sizes.http = Duration::from_secs_f64(num(arg, it.next())),
            "--rate" => a.sizes.rate = num(arg, it.next()) as u32,
            "--conns" => a.sizes.conns = num(arg, it.next()) as usize,
            "--idle-secs" => a.sizes.idle = Duration::from_secs_f64(num(arg, it.next())),
            "--debug-exe" => {
                let v = it
                    .next()
                    .unwrap_or_else(|| fail("--debug-exe needs a path".into()));
                a.debug_exe = Some(v.into());
            }
            "--no-debug" => a.no_debug = true,
            "--quick" => {
                a.rounds = 3;
                a.sizes.tasks = 20_000;
                a.sizes.http = Duration::from_millis(500);
                a.sizes.idle = Duration::from_secs(2);
            }
            "--configs" => {
                let v = it
                    .next()
                    .unwrap_or_else(|| fail("--configs needs a list".into()));
                a.configs = v
                    .split(',')
                    .map(|c| {
                        Config::parse(c).unwrap_or_else(|| {
                            fail(format!(
                                "unknown configuration {c:?}; the configurations: {}",
                                Config::ALL.map(|c| c.name()).join(", ")
                            ))
                        })
                    })
                    .collect();
                if !a.configs.contains(&Config::Plain) {
                    a.configs.insert(0, Config::Plain); // the ratios' denominator
                }
            }
            "--workloads" => {
                let v = it
                    .next()
                    .unwrap_or_else(|| fail("--workloads needs a list".into()));
                a.workloads = v
                    .split(',')
                    .map(|w| {
                        Workload::parse(w).unwrap_or_else(|| {
                            fail(format!(
                                "unknown workload {w:?}; the workloads: {}",
                                Workload::ALL.map(|w| w.name()).join(", ")
                            ))
                        })
                    })
                    .collect();
            }
            "child" => {
                let c = it.next().and_then(|c| Config::parse(c));
                let w = it.next().and_then(|w| Workload::parse(w));
                match (c, w) {
                    (Some(c), Some(w)) => a.child = Some((c, w)),
                    _ => fail("child takes a configuration and a workload".into()),
                }
            }
            other => fail(format!(
                "unknown argument {other:?}; see the top of bench/src/main.rs for the options"
            )),
        }
    }
    a
}

fn main() {
    let args = parse_args();
    if let Some((config, workload)) = args.child {
        println!("{}", child::run(config, workload, args.sizes));
        return;
    }
    let me = std::env::current_exe().unwrap_or_else(|e| fail(format!("cannot find myself: {e}")));
    if cfg!(debug_assertions) {
        eprintln!("compare: this driver is a debug build, so is every measurement but the tracing-tools ones; run it with --release");
    }
    let tracing_build = if args.configs.iter().any(|c| c.needs_tracing()) {
        Some(build_tracing_tools())
    } else {
        None
    };
    let debug_build = if args.workloads.contains(&Workload::FirstPin)
        && args.configs.iter().any(|c| runs_debug(*c))
        && !args.no_debug
    {
        Some(args.debug_exe.clone().unwrap_or_else(build_debug))
    } else {
        None
    };
    let mut results: Vec<serde_json::Value> = Vec::new();
    for round in 0..args.rounds {
        for &workload in &args.workloads {
            // (configuration, from the debug build)
            let mut order: Vec<(Config, bool)> = args
                .configs
                .iter()
                .copied()
                .filter(|c| workload != Workload::Stuck || c.reports_stuck())
                .filter(|c| match workload {
                    Workload::Busy => c.in_busy(),
                    _ if c.busy_only() => false,
                    Workload::Http => true,
                    _ => !c.http_only(),
                })
                .filter(|c| matches!(workload, Workload::Http | Workload::Stall) || !c.stall_pair())
                .filter(|c| workload != Workload::Stall || c.in_stall())
                .map(|c| (c, false))
                .collect();
            if workload == Workload::FirstPin && debug_build.is_some() {
                order.extend(
                    args.configs
                        .iter()
                        .filter(|c| runs_debug(**c))
                        .map(|c| (*c, true)),
                );
            }
            if order.is_empty() {
                continue;
            }
            let n = order.len();
            order.rotate_left(round % n);
            for (config, debug) in order {
                eprint!(
                    "\rround {}/{} {:<9} {:<22}",
                    round + 1,
                    args.rounds,
                    workload.name(),
                    format!("{}{}", config.name(), if debug { " (debug)" } else { "" })
                );
                let exe = if debug {
                    debug_build.as_ref().expect("built above")
                } else if config.needs_tracing() {
                    tracing_build.as_ref().expect("built above")
                } else {
                    &me
                };
                let mut r = measure(exe, config, workload, &args);
                if debug && r["debug_build"] != true {
                    fail(format!(
                        "{} is not a debug build (its debug assertions are off); give --debug-exe a `cargo build -p pinwatch-bench` binary, or --no-debug",
                        exe.display()
                    ));
                }
                r["round"] = round.into();
                r["debug"] = debug.into();
                results.push(r);
            }
        }
    }
    eprintln!();
    print_table(&results, &args);
}

/// The first-pin workload runs from the debug build too: the configurations that report a stuck
/// worker, but those that need the tracing-tools build (a debug one of those would be a third
/// build of every dependency).
fn runs_debug(c: Config) -> bool {
    c.reports_stuck() && !c.needs_tracing()
}

/// Builds this program in the dev profile (`cargo build -p pinwatch-bench --bin compare`, no
/// `--release`) into the usual target directory, where `cargo test` builds it too, with the
/// cargo that runs us; returns the executable cargo names.
fn build_debug() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("compare: building the debug child for the first-pin workload (cargo build -p pinwatch-bench --bin compare)");
    let out = Command::new(cargo)
        .args([
            "build",
            "-p",
            "pinwatch-bench",
            "--bin",
            "compare",
            "--message-format",
            "json-render-diagnostics",
        ])
        .current_dir(&root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| fail(format!("cannot run cargo: {e}")));
    if !out.status.success() {
        fail("building the debug child failed (see above); or give one with --debug-exe PATH, or leave it out with --no-debug".into());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "compare")
        .find_map(|m| m["executable"].as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| fail("cargo built the debug child but named no executable; give one with --debug-exe PATH".into()))
}

/// Builds this program with the `tracing-tools` feature into `target/bench-tracing`, with the
/// cargo that runs us.
fn build_tracing_tools() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = root.join("target/bench-tracing");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("compare: building the tracing-tools configurations (console-subscriber, tokio-blocked) into {}", target.display());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "pinwatch-bench",
            "--bin",
            "compare",
            "--features",
            "tracing-tools",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&root)
        .status()
        .unwrap_or_else(|e| fail(format!("cannot run cargo: {e}")));
    if !status.success() {
        fail("building the tracing-tools configurations failed (see above); or leave them out with --configs".into());
    }
    target.join("release/compare")
}

fn measure(
    exe: &std::path::Path,
    config: Config,
    workload: Workload,
    args: &Args,
) -> serde_json::Value {
    let s = args.sizes;
    let out = Command::new(exe)
        .args([
            "--tasks",
            &s.tasks.to_string(),
            "--http-secs",
            &s.http.as_secs_f64().to_string(),
        ])
        .args([
            "--rate",
            &s.rate.to_string(),
            "--conns",
            &s.conns.to_string(),
            "--idle-secs",
            &s.idle.as_secs_f64().to_string(),
        ])
        .args(["child", config.name(), workload.name()])
        .env_remove("PINWATCH")
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| fail(format!("cannot run {}: {e}", exe.display())));
    let stdout = String::from_utf8_lossy(&out.stdout);
    match (
        out.status.success(),
        stdout
            .lines()
            .last()
            .map(serde_json::from_str::<serde_json::Value>),
    ) {
        (true, Some(Ok(v))) => v,
        _ => fail(format!(
            "{} on {} failed ({}):\n{}{}",
            config.name(),
            workload.name(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {}", kernel.trim())
}

/// One row's numbers: per round, from the results of one (workload, config) from the
/// driver's own build (or the tracing-tools one).
fn field(results: &[serde_json::Value], w: Workload, c: Config, key: &str) -> BTreeMap<u64, f64> {
    field_of(results, w, c, key, false)
}

/// The same, from the debug build (`debug`) or not.
fn field_of(
    results: &[serde_json::Value],
    w: Workload,
    c: Config,
    key: &str,
    debug: bool,
) -> BTreeMap<u64, f64> {
    results
        .iter()
        .filter(|r| r["workload"] == w.name() && r["config"] == c.name())
        .filter(|r| r["debug"] == debug)
        .filter_map(|r| Some((r["round"].as_u64()?, r[key].as_f64()?)))
        .collect()
}

/// Median of the per-round differences `c - plain`.
fn over_plain(results: &[serde_json::Value], w: Workload, c: Config, key: &str) -> Option<f64> {
    let base = field(results, w, Config::Plain, key);
    median(
        field(results, w, c, key)
            .iter()
            .filter_map(|(r, x)| Some(x - base.get(r)?))
            .collect(),
    )
}

fn print_table(results: &[serde_json::Value], args: &Args) {
    let s = args.sizes;
    println!(
        "pinwatch-bench compare: {} rounds, {}; storm {} tasks x 10 yield_now on 2 workers; http/mixed {} req/s over {} keep-alive connections for {:?} (mixed: 1 request in 500 sleeps 30 ms on its worker, after {:?} of the same load); idle {:?} after {:?}\n",
        args.rounds,
        machine(),
        s.tasks,
        s.rate,
        s.conns,
        s.http,
        child::MIXED_WARMUP,
        s.idle,
        child::IDLE_WARMUP
    );
    let main_table = args.workloads.iter().any(|w| {
        matches!(
            w,
            Workload::Storm | Workload::Http | Workload::Mixed | Workload::Stuck
        )
    });
    if main_table {
        print_main_table(results, args);
    }
    if args
        .workloads
        .iter()
        .any(|w| matches!(w, Workload::Idle | Workload::FirstPin))
    {
        if main_table {
            println!();
        }
        print_idle_table(results, args);
    }
    if args.workloads.contains(&Workload::Stall) {
        println!();
        print_stall_table(results, args);
    }
    if args.workloads.contains(&Workload::Busy) {
        println!();
        print_busy_table(results, args);
    }
}

/// The busy workload: pinwatch's own threads while the workers serve requests.
fn print_busy_table(results: &[serde_json::Value], args: &Args) {
    println!("| configuration | the tool's threads: CPU | their wake-ups | per wake-up | by thread | whole process: CPU | requests |");
    println!("|---|---|---|---|---|---|---|");
    let med = |c: Config, key: &str| {
        median(
            field(results, Workload::Busy, c, key)
                .into_values()
                .collect(),
        )
    };
    for &c in args.configs.iter().filter(|c| c.in_busy()) {
        let Some(own) = med(c, "own_cpu_ms_per_s") else {
            continue;
        };
        // Each thread's median over the rounds.
        let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in results
            .iter()
            .filter(|r| r["workload"] == Workload::Busy.name() && r["config"] == c.name())
        {
            if let Some(m) = r["own_cpu_ms_per_s_by_thread"].as_object() {
                for (k, v) in m {
                    by.entry(k.clone()).or_default().extend(v.as_f64());
                }
            }
        }
        let by: Vec<String> = by
            .into_iter()
            .filter_map(|(k, v)| Some(format!("{k} {:.2}", median(v)?)))
            .collect();
        // Each round's CPU over its own wake-ups, the median of those.
        let wakeups = field(results, Workload::Busy, c, "own_wakeups_per_s");
        let per_wakeup = median(
            field(results, Workload::Busy, c, "own_cpu_ms_per_s")
                .iter()
                .filter_map(|(r, cpu)| Some(cpu * 1e3 / wakeups.get(r).filter(|&&w| w > 0.0)?))
                .collect(),
        )
        .map_or("–".into(), |us| format!("{us:.1} µs"));
        println!(
            "| {} | {own:.2} ms/s | {:.0} /s | {per_wakeup} | {} | {:.0} ms/s | {:.0} req/s |",
            c.label(),
            med(c, "own_wakeups_per_s").unwrap_or(0.0),
            if by.is_empty() {
                "–".into()
            } else {
                by.join(", ")
            },
            med(c, "process_cpu_ms_per_s").unwrap_or(0.0),
            med(c, "req_per_s").unwrap_or(0.0),
        );
    }
    println!(
        "\nbusy: the http workload's service and load ({} req/s over {} keep-alive connections, 2 workers, nothing pinned), measured for {:?} after {:?}; the tool's threads are pinwatch's, named pinwatch-* (the watchdog, the exporters), or the waker row's one thread, which only sleeps {:?} at a time as the watchdog does between scans (what the wake-ups alone cost here): CPU from /proc/self/task/*/schedstat, wake-ups the context switches, per second; whole process from getrusage (server, client, tools); medians of {} rounds.",
        args.sizes.rate,
        args.sizes.conns,
        args.sizes.http,
        child::BUSY_WARMUP,
        child::WAKER_PERIOD,
        field(results, Workload::Busy, Config::Plain, "process_cpu_ms_per_s").len().max(
            field(results, Workload::Busy, Config::Pinwatch, "own_cpu_ms_per_s").len()
        ),
    );
}

/// The stall workload: the requests answered while a driver-woken task blocked its worker.
fn print_stall_table(results: &[serde_json::Value], args: &Args) {
    println!("| configuration | requests answered during the pin (each round) | all rounds | http CPU µs/request |");
    println!("|---|---|---|---|");
    for &c in args.configs.iter().filter(|c| c.in_stall()) {
        let asked = field(results, Workload::Stall, c, "asked");
        let answered = field(results, Workload::Stall, c, "answered");
        if asked.is_empty() {
            continue;
        }
        let rounds: Vec<String> = asked
            .iter()
            .map(|(r, a)| format!("{:.0}/{a:.0}", answered.get(r).copied().unwrap_or(0.0)))
            .collect();
        let (sum_answered, sum_asked): (f64, f64) = (answered.values().sum(), asked.values().sum());
        let cpu = median(
            field(results, Workload::Http, c, "cpu_us_per_req")
                .into_values()
                .collect(),
        )
        .map_or("–".into(), |v| format!("{v:.1}"));
        println!(
            "| {} | {} | {:.0} of {:.0} ({:.0} %) | {cpu} |",
            c.label(),
            rounds.join(", "),
            sum_answered,
            sum_asked,
            100.0 * sum_answered / sum_asked.max(1.0)
        );
    }
    println!(
        "\nstall: the http service on 2 workers, {} requests a second each on a new connection; a task woken by a timer (run by the worker that drove the timers and I/O) blocks that worker for {:?}; answered = due while it blocks (but its last 100 ms) and answered before it ends. CPU per request from the http workload (when run).",
        child::STALL_RATE,
        child::STALL_PIN
    );
}

fn print_main_table(results: &[serde_json::Value], args: &Args) {
    println!("| workload | configuration | median | vs plain (median of per-round ratios) | ns/poll | p50 / p99 latency | CPU µs/request | peak RSS | stuck worker reported after |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let stuck = |key: &str| -> BTreeMap<&str, f64> {
        args.configs
            .iter()
            .filter_map(|c| {
                let v = field(results, Workload::Stuck, *c, key);
                Some((c.name(), median(v.into_values().collect())?))
            })
            .collect()
    };
    let (warm, cold) = (stuck("detect_ms"), stuck("detect_cold_ms"));
    for &w in args
        .workloads
        .iter()
        .filter(|w| matches!(w, Workload::Storm | Workload::Http | Workload::Mixed))
    {
        let key = if w == Workload::Storm {
            "wall_ms"
        } else {
            "cpu_us_per_req"
        };
        let base = field(results, w, Config::Plain, key);
        for &c in &args.configs {
            let v = field(results, w, c, key);
            if v.is_empty() {
                continue;
            }
            let ratio = median(
                v.iter()
                    .filter_map(|(r, x)| Some(x / base.get(r)?))
                    .collect(),
            );
            let ratio = ratio.map_or("–".into(), |r| format!("{:+.1} %", (r - 1.0) * 100.0));
            let rss = median(field(results, w, c, "peak_rss_kib").into_values().collect())
                .unwrap_or(0.0)
                / 1024.0;
            let detect = match (warm.get(c.name()), cold.get(c.name())) {
                (Some(w), Some(first)) => {
                    format!("{w:.1} ms (first of the process: {first:.0} ms)")
                }
                _ if c.reports_stuck() => "–".into(),
                _ => "never (not while stuck)".into(),
            };
            if w == Workload::Storm {
                let wall = median(v.values().copied().collect()).unwrap_or(0.0);
                let polls = median(field(results, w, c, "task_polls").into_values().collect())
                    .unwrap_or(1.0);
                println!(
                    "| storm | {} | {wall:.0} ms | {ratio} | {:.0} | | | {rss:.0} MiB | {detect} |",
                    c.label(),
                    wall * 1e6 / polls
                );
            } else {
                let m = |k: &str| {
                    median(field(results, w, c, k).into_values().collect()).unwrap_or(0.0)
                };
                println!(
                    "| {} | {} | {:.0} req/s | {ratio} CPU | | {:.2} / {:.2} ms | {:.1} | {rss:.0} MiB | |",
                    w.name(),
                    c.label(),
                    m("req_per_s"),
                    m("p50_us") / 1e3,
                    m("p99_us") / 1e3,
                    m("cpu_us_per_req"),
                );
            }
        }
    }
    if args.workloads.contains(&Workload::Mixed) {
        print_pin_cost(results, args);
    }
    let n = |w: Workload, c: Config| field(results, w, c, "wall_ms").len();
    println!(
        "\nstorm ratios over {} rounds; http CPU per request is the whole process (server, client, tools); stuck-worker latency: from the task blocking to the tool's first report (pinwatch: the `in_progress` event reaching a sink), median of {} runs; the first report of a process also loads the debug info symbols need.",
        n(Workload::Storm, Config::Plain),
        args.rounds
    );
}

/// Under the main table: what pinwatch's own threads spent in the mixed workload, a second and
/// a pin (medians over the rounds; the window holds the process's first pin, whose one-time
/// symbol load is in it).
fn print_pin_cost(results: &[serde_json::Value], args: &Args) {
    for &c in &args.configs {
        let own = field(results, Workload::Mixed, c, "own_cpu_ms");
        let pins = field(results, Workload::Mixed, c, "own_pins");
        let window = field(results, Workload::Mixed, c, "own_window_s");
        // The median over the rounds of `own` divided by `by`'s figure of the same round.
        let per = |by: &BTreeMap<u64, f64>| {
            median(
                own.iter()
                    .filter_map(|(r, o)| Some(o / by.get(r).filter(|d| **d > 0.0)?))
                    .collect(),
            )
        };
        let (Some(per_s), Some(per_pin), Some(n)) = (
            per(&window),
            per(&pins),
            median(pins.into_values().collect()),
        ) else {
            continue;
        };
        println!(
            "\nmixed, {}: pinwatch's own threads (every one of them, its exporters' too) {per_s:.1} ms of CPU a second, {per_pin:.2} ms a pin ({n:.0} pins a round, after a warm-up of {} s that holds the process's first pin and its one-time symbol load)",
            c.label(),
            child::MIXED_WARMUP.as_secs_f64()
        );
    }
}

/// The second table: what a service costs when it does nothing, and what its first pin costs.
fn print_idle_table(results: &[serde_json::Value], args: &Args) {
    let idle = args.workloads.contains(&Workload::Idle);
    let first = args.workloads.contains(&Workload::FirstPin);
    let debug = first && results.iter().any(|r| r["debug"] == true);
    let mut head = vec!["configuration"];
    if idle {
        head.extend([
            "idle CPU",
            "over plain tokio (same rounds)",
            "idle wake-ups",
        ]);
    }
    if first {
        head.extend([
            "first pin reported after",
            "memory the first pin added: VmRSS / RssAnon",
        ]);
    }
    if debug {
        head.extend(["debug build: reported after", "debug build: memory added"]);
    }
    println!("| {} |", head.join(" | "));
    println!("|{}", "---|".repeat(head.len()));
    let med = |w: Workload, c: Config, key: &str, debug: bool| {
        median(field_of(results, w, c, key, debug).into_values().collect())
    };
    let mib = |kib: Option<f64>| kib.map_or("–".into(), |k| format!("{:+.1}", k / 1024.0));
    for &c in &args.configs {
        let mut row = vec![c.label().to_owned()];
        if idle {
            let cpu = med(Workload::Idle, c, "cpu_ms_per_s", false);
            row.push(cpu.map_or("–".into(), |v| format!("{v:.3} ms/s")));
            row.push(
                match over_plain(results, Workload::Idle, c, "cpu_ms_per_s") {
                    _ if c == Config::Plain => String::new(),
                    Some(d) => format!("{d:+.3} ms/s"),
                    None => "–".into(),
                },
            );
            let wake = med(Workload::Idle, c, "wakeups_per_s", false);
            row.push(wake.map_or("–".into(), |v| format!("{v:.0} /s")));
        }
        let pin = |debug: bool| -> [String; 2] {
            let detect = match med(Workload::FirstPin, c, "detect_ms", debug) {
                Some(ms) => format!("{ms:.0} ms"),
                None if c.reports_stuck() => "–".into(),
                None => "never (not while stuck)".into(),
            };
            let rss = med(Workload::FirstPin, c, "rss_added_kib", debug);
            let anon = med(Workload::FirstPin, c, "anon_added_kib", debug);
            let memory = if rss.is_none() && anon.is_none() {
                "–".into()
            } else {
                format!("{} / {} MiB", mib(rss), mib(anon))
            };
            [detect, memory]
        };
        if first {
            row.extend(pin(false));
        }
        if debug {
            if runs_debug(c) {
                row.extend(pin(true));
            } else {
                row.extend([String::new(), String::new()]);
            }
        }
        println!("| {} |", row.join(" | "));
    }
    println!();
    if idle {
        let rounds = field(results, Workload::Idle, Config::Plain, "cpu_ms_per_s").len();
        println!(
            "idle: a runtime of 2 workers whose only task sleeps (1 s at a time), measured for {:?} after a {:?} warm-up; CPU is the sum over /proc/self/task/*/schedstat (first field: time on a CPU) of every thread of the process, but the bench's own stand-ins for a Prometheus scraper and an OTLP receiver, per second of the window; wake-ups are the context switches (voluntary_ctxt_switches + nonvoluntary_ctxt_switches in /proc/self/task/*/status) per second; medians of {rounds} rounds, \"over plain tokio\" the median of per-round differences. pinwatch (defaults) runs idle with its Prometheus endpoint on (127.0.0.1, not scraped) and, as by default, its heartbeat and control socket.",
            args.sizes.idle,
            child::IDLE_WARMUP,
        );
    }
    if first {
        println!(
            "first pin: in a process of its own (nothing blocked, so nothing symbolized, before), a task blocks its worker; reported after = from the block to the tool's first report at a sink (pinwatch: the `in_progress` event); memory added = VmRSS and RssAnon (/proc/self/status) right after that report minus before the pin (a tool that does not report while stuck: after the worker was held {:?} and released, {:?} later); medians.{}",
            child::UNREPORTED_HOLD,
            child::UNREPORTED_HOLD,
            if debug {
                " Debug build: the same workload from a dev-profile build (`cargo build -p pinwatch-bench`), for the configurations that report a stuck worker and need no tracing-tools build."
            } else {
                ""
            }
        );
    }
}
