//! `tour`: every pinning case, bad and fixed, with pinwatch on. Prints per case the expected
//! reason, what pinwatch detected, and bad vs fixed time; then a verdict, and the `pinwatch print`
//! view of one event; writes the whole run as a `pinwatch report` page and says where. Exits
//! non-zero if a bad case was missed or a fixed case produced an event.
//!
//! `cargo run --release -p sample-apps --bin tour`

use clap::Parser;
use sample_apps::{cases, run, table, Variant};

#[derive(Parser)]
#[command(
    about = "Run every pinning case, bad and fixed, with pinwatch on, and check what it reports"
)]
struct Args {
    /// Run only these cases (by name).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where to write the HTML report of the run (default: pinwatch-tour-report.html in the
    /// system's temporary directory).
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

fn main() {
    let args = Args::parse();
    let all = cases();
    for name in &args.only {
        if !all.iter().any(|c| c.name == name) {
            let names: Vec<&str> = all.iter().map(|c| c.name).collect();
            eprintln!(
                "tour: no case named {name:?}; the cases are {}",
                names.join(", ")
            );
            std::process::exit(2);
        }
    }
    let selected: Vec<_> = all
        .iter()
        .filter(|c| args.only.is_empty() || args.only.iter().any(|o| o == c.name))
        .collect();
    // Before any thread starts: a case's setup (blocking_dns's namespaces) must cover every
    // thread of the process. The other cases only use 127.0.0.1, which the namespaces keep.
    let mut not_runnable = Vec::new();
    for case in &selected {
        if let Err(why) = sample_apps::prepare(case) {
            eprintln!("tour: {} cannot run here: {why}", case.name);
            not_runnable.push((case.name, why));
        }
    }
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut example = None;
    // The first event of a fixed case, shown whole with the verdict: what pinned it.
    let mut unexpected: Option<pinwatch::PinnedEvent> = None;
    let mut recorded: Vec<pinwatch::PinnedEvent> = Vec::new();
    for case in selected {
        if not_runnable.iter().any(|(n, _)| *n == case.name) {
            let mut row = vec!["-".to_owned(); 12];
            row[0] = case.name.to_owned();
            row[2] = case.expected.to_string();
            row[11] = "not runnable here".into();
            rows.push(row);
            continue;
        }
        eprintln!("tour: {} — {}", case.name, case.about);
        let mut variants = vec![(Variant::Bad, case.expected, case.allowed)];
        if case.name == "lock_sleep" {
            const HELD: &[pinwatch::Reason] = &[pinwatch::Reason::LockHeld];
            variants.push((Variant::PinwatchMutex, pinwatch::Reason::LockHeld, HELD));
        }
        if case.name == "stalled_runtime" {
            variants.push((Variant::NotTimerWoken, case.expected, case.allowed));
        }
        let fixed = run(case, Variant::Fixed, case.workers, case.tasks.1, false);
        recorded.extend(fixed.events.iter().cloned());
        for (variant, expected, allowed) in variants {
            let bad = run(case, variant, case.workers, case.tasks.1, false);
            recorded.extend(bad.events.iter().cloned());
            let mut verdict = bad.check(expected, allowed, case.min_expected);
            if case.name == "traced_service" && verdict.is_ok() {
                // Every pin names the request it happened in: a GET /report, never /health.
                verdict = sample_apps::traced::check_spans(&bad.events);
            }
            if case.name == "stalled_runtime" && verdict.is_ok() {
                // Whether the runtime stalls depends on where the other worker is when the
                // timer fires (usually parked: it stalls); pinwatch must say what happened, and
                // when it handed the drivers over, the tickers must have run on from there.
                let stalled = bad.events.iter().any(|e| e.runtime_stalled);
                let handed = bad
                    .events
                    .iter()
                    .filter_map(|e| e.drivers.as_ref()?.taken_over_after)
                    .max();
                let frozen = bad.metric.as_deref().and_then(|m| {
                    m.strip_prefix("tickers frozen ")?
                        .split(' ')
                        .next()?
                        .parse::<u64>()
                        .ok()
                });
                verdict = match (frozen, stalled, handed) {
                    (Some(ms), false, _) if ms >= 500 => Err(format!(
                        "the tickers stood still {ms} ms; not reported as runtime_stalled"
                    )),
                    (Some(ms), true, Some(after)) if ms > after.as_millis() as u64 + 300 => {
                        Err(format!(
                            "the drivers were handed over {} ms into the pin, yet the tickers \
                             stood still {ms} ms",
                            after.as_millis()
                        ))
                    }
                    (Some(ms), true, None) if ms < 100 => Err(format!(
                        "reported as runtime_stalled, though the tickers ran (frozen {ms} ms)"
                    )),
                    (None, _, _) => Err("no ticker measurement".into()),
                    _ => Ok(()),
                };
            }
            if verdict.is_ok() {
                // What a real service's case must name beyond its reason: its own line, the
                // advice that fits.
                verdict = sample_apps::services::check(case.name, &bad.events);
            }
            let ok = verdict.is_ok() && fixed.events.is_empty();
            if let Err(why) = &verdict {
                failures.push(format!("{} ({variant:?}): {why}", case.name));
            }
            let name = match variant {
                Variant::Bad => case.name.to_owned(),
                Variant::NotTimerWoken => format!("{} (not timer-woken)", case.name),
                _ => format!("{} (pinwatch Mutex)", case.name),
            };
            let metric = match (&bad.metric, &fixed.metric) {
                (Some(b), Some(f)) => format!("bad: {b}; fixed: {f}"),
                _ => String::new(),
            };
            rows.push(vec![
                name,
                format!("W={} N={}", case.workers, case.tasks.1),
                expected.to_string(),
                bad.events.len().to_string(),
                bad.reasons_cell(),
                bad.stalled_cell(),
                bad.top_frame(expected).unwrap_or_else(|| "-".into()),
                table::ms(bad.elapsed),
                table::ms(fixed.elapsed),
                fixed.events.len().to_string(),
                metric,
                if ok { "ok".into() } else { "FAIL".into() },
            ]);
            if example.is_none() {
                example = bad
                    .events
                    .iter()
                    .find(|e| e.reason == Some(expected))
                    .cloned();
            }
        }
        if let Some(e) = fixed.events.first() {
            unexpected.get_or_insert_with(|| e.clone());
            let first: Vec<String> = fixed.events.iter().take(2).map(|e| e.headline()).collect();
            failures.push(format!(
                "{} (fixed): expected no events, got {:?}: {}",
                case.name,
                fixed.reasons(),
                first.join(" | ")
            ));
        }
    }
    print!(
        "{}",
        table::render(
            &[
                "case",
                "size",
                "expected",
                "events",
                "detected",
                "stalled runtime",
                "top frame (bad)",
                "bad time",
                "fixed time",
                "fixed events",
                "measured",
                "verdict",
            ],
            &rows
        )
    );
    if let Some(e) = example {
        println!("\nOne event as `pinwatch print` shows it:\n");
        print!("{}", pinwatch::recording::render_print(&[e]));
    }
    let report = args
        .report
        .unwrap_or_else(|| std::env::temp_dir().join("pinwatch-tour-report.html"));
    let page = pinwatch_cli::report::render(&recorded, "tour: every pinning case", &[])
        .and_then(|p| std::fs::write(&report, p).map_err(|e| e.to_string()));
    match page {
        Ok(()) => println!(
            "\nreport: {} ({} events; open it in a browser)",
            report.display(),
            recorded.len()
        ),
        Err(e) => failures.push(format!("report {}: {e}", report.display())),
    }
    for (name, why) in &not_runnable {
        println!("\nnot run: {name}: {why}");
    }
    if failures.is_empty() {
        println!("\nverdict: every bad case detected with the expected reason; every fixed case clean ({} cases)", rows.len() - not_runnable.len());
    } else {
        println!("\nverdict: FAILED");
        for f in &failures {
            println!("  {f}");
        }
        if let Some(e) = unexpected {
            println!("\nA fixed case's first event:\n");
            print!("{}", pinwatch::recording::render_print(&[e]));
        }
        std::process::exit(1);
    }
}
