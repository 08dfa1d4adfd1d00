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
//! Options: `--rounds N` (15), `--tasks N` (200000), `--http-secs S` (2), `--rate N` (4000
//! requests/s), `--conns N` (16), `--configs a,b,…`, `--workloads a,b,…`, `--quick` (3 rounds,
//! small sizes: a smoke run).

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
        },
        configs: Config::ALL.to_vec(),
        workloads: Workload::ALL.to_vec(),
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
            "--quick" => {
                a.rounds = 3;
                a.sizes.tasks = 20_000;
                a.sizes.http = Duration::from_millis(500);
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
    let tracing_build = if args.configs.iter().any(|c| c.needs_tracing()) {
        Some(build_tracing_tools())
    } else {
        None
    };
    let mut results: Vec<serde_json::Value> = Vec::new();
    for round in 0..args.rounds {
        for &workload in &args.workloads {
            let mut order: Vec<Config> = args
                .configs
                .iter()
                .copied()
                .filter(|c| workload != Workload::Stuck || c.reports_stuck())
                .collect();
            if order.is_empty() {
                continue;
            }
            let n = order.len();
            order.rotate_left(round % n);
            for config in order {
                eprint!(
                    "\rround {}/{} {:<6} {:<18}",
                    round + 1,
                    args.rounds,
                    workload.name(),
                    config.name()
                );
                let exe = if config.needs_tracing() {
                    tracing_build.as_ref().expect("built above")
                } else {
                    &me
                };
                let mut r = measure(exe, config, workload, &args);
                r["round"] = round.into();
                results.push(r);
            }
        }
    }
    eprintln!();
    print_table(&results, &args);
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

/// One row's numbers: per round, from the results of one (workload, config).
fn field(results: &[serde_json::Value], w: Workload, c: Config, key: &str) -> BTreeMap<u64, f64> {
    results
        .iter()
        .filter(|r| r["workload"] == w.name() && r["config"] == c.name())
        .filter_map(|r| Some((r["round"].as_u64()?, r[key].as_f64()?)))
        .collect()
}

fn print_table(results: &[serde_json::Value], args: &Args) {
    let s = args.sizes;
    println!(
        "pinwatch-bench compare: {} rounds, {}; storm {} tasks x 10 yield_now on 2 workers; http/mixed {} req/s over {} keep-alive connections for {:?} (mixed: 1 request in 500 sleeps 30 ms on its worker)\n",
        args.rounds, machine(), s.tasks, s.rate, s.conns, s.http
    );
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
    for &w in args.workloads.iter().filter(|w| **w != Workload::Stuck) {
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
    let n = |w: Workload, c: Config| field(results, w, c, "wall_ms").len();
    println!(
        "\nstorm ratios over {} rounds; http CPU per request is the whole process (server, client, tools); stuck-worker latency: from the task blocking to the tool's first report (pinwatch: the `in_progress` event reaching a sink), median of {} runs; the first report of a process also loads the debug info symbols need.",
        n(Workload::Storm, Config::Plain),
        args.rounds
    );
}
