//! zkgate against etcd and the raw ZooKeeper recipe, in one run on one machine.
//!
//! ```text
//! cargo run --release -p zkgate-bench -- --out BENCHMARKS.md [--only W1,W3] [--quick]
//! ```
//!
//! Starts a standalone ZooKeeper (`zkgate_localzk`, Debian's `zookeeper` package), a
//! single-member etcd (Debian's `etcd-server`) and the release `zkgate serve` binary with its
//! default flags as a child process, then runs every workload on the three systems in the same
//! order (zkgate, etcd, raw ZK). bench/README.md says what each workload measures and how.

mod clients;
mod env;
mod etcd;
mod frames;
mod pb;
mod report;
mod stats;
mod svg;
mod workloads;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;

use zkgate_localzk::{four_letter_word, LocalZk, LocalZkOptions};

use crate::clients::Target;
use crate::env::Gateway;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "zkgate-bench",
    about = "zkgate vs etcd vs the raw ZooKeeper recipe, in one run"
)]
pub struct Args {
    /// Write the report here (Markdown, with the figures linked), e.g. BENCHMARKS.md.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only these workloads (comma-separated): W1,W2,W3,W4,W5,observe,streams.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Scaled down for development: fewer rounds, shorter runs, 200 instead of 2,000 waiting
    /// candidates, 1,000 observers, 5,000 streams.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the results as JSON.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results/latest.json"))]
    pub json: PathBuf,
    /// Where to write the figures (SVG).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/figures"))]
    pub figures: PathBuf,
    /// The gateway binary. Default: `cargo build --release --workspace --bins`, then the
    /// `zkgate` beside this program.
    #[arg(long)]
    pub gateway: Option<PathBuf>,
    /// An extra flag for `zkgate serve` (repeatable; the report names them), e.g.
    /// `--gateway-arg=--zk-sessions=4`. Without any, the gateway runs with its defaults.
    #[arg(long = "gateway-arg", allow_hyphen_values = true)]
    pub gateway_args: Vec<String>,
    /// etcd's server binary.
    #[arg(long, default_value = "/usr/bin/etcd")]
    pub etcd: PathBuf,
    /// Leader changes in the `observe` workload (default 5, 3 with --quick): more rounds give
    /// steadier medians when comparing two gateway binaries.
    #[arg(long)]
    pub observe_rounds: Option<usize>,
    /// Which readers the `observe` workload reads its observers with, in order, each on an
    /// election of its own: `frames`, a minimal HTTP/2 reader that parses each connection's
    /// frames in one task, standing for clients whose CPU is their own (the fan-out's
    /// figures); `grpc`, tonic clients, each observer a `Streaming` decoded by its
    /// connection's task (costlier for this process, which shares the gateway's cores).
    /// Default `frames,grpc`: both, so every report shows how much of the figure is the reader.
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1..,
          default_values_t = [ObserveReader::Frames, ObserveReader::Grpc])]
    pub observe_reader: Vec<ObserveReader>,
}

/// See [`Args::observe_reader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObserveReader {
    Frames,
    Grpc,
}

/// How much of each workload to run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Scale {
    pub w1_rounds: usize,
    pub w2_rounds_20ms: usize,
    pub w2_rounds_150ms: usize,
    pub throughput_secs: f64,
    pub w5_candidates: usize,
    pub w5_failovers: usize,
    pub observers: usize,
    pub observe_rounds: usize,
    pub observe_readers: Vec<ObserveReader>,
    pub streams: usize,
}

impl Scale {
    fn new(quick: bool) -> Scale {
        if quick {
            Scale {
                w1_rounds: 20,
                w2_rounds_20ms: 10,
                w2_rounds_150ms: 5,
                throughput_secs: 2.0,
                w5_candidates: 200,
                w5_failovers: 10,
                observers: 1_000,
                observe_rounds: 3,
                observe_readers: vec![ObserveReader::Frames, ObserveReader::Grpc],
                streams: 5_000,
            }
        } else {
            Scale {
                w1_rounds: 200,
                w2_rounds_20ms: 100,
                w2_rounds_150ms: 40,
                throughput_secs: 9.0,
                w5_candidates: 2_000,
                w5_failovers: 50,
                observers: 10_000,
                observe_rounds: 5,
                observe_readers: vec![ObserveReader::Frames, ObserveReader::Grpc],
                streams: 100_000,
            }
        }
    }
}

pub const WORKLOADS: [&str; 7] = ["W1", "W2", "W3", "W4", "W5", "observe", "streams"];

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Progress on stderr, so that stdout is just the table.
pub fn phase(what: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[{t:>6.1} s] {what}");
}

/// Builds the release gateway (quick when it is up to date) and returns its path. The whole
/// workspace's binaries are built in one go so that dependency features unify exactly as for
/// this program's own `cargo run -p zkgate-bench`: building `-p zkgate` alone would unify them
/// differently and recompile the gateway's dependency tree on every run.
fn gateway_binary(args: &Args) -> PathBuf {
    if let Some(p) = &args.gateway {
        return p.clone();
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    phase("cargo build --release --workspace --bins (the gateway)");
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "--release", "--workspace", "--bins"])
        .current_dir(&workspace);
    // `cargo run` gave this process its package's CARGO_* variables, OUT_DIR and a
    // LD_LIBRARY_PATH into target/; a nested cargo that inherits them sees a changed environment,
    // reruns build scripts and recompiles half the tree, and so does the next `cargo run`.
    for (k, v) in std::env::vars_os() {
        let k_str = k.to_string_lossy();
        if (k_str.starts_with("CARGO_") && k_str != "CARGO_HOME" && k_str != "CARGO_TARGET_DIR")
            || k_str == "OUT_DIR"
        {
            build.env_remove(&k);
        }
        if k_str == "LD_LIBRARY_PATH" {
            let kept: Vec<_> = std::env::split_paths(&v)
                .filter(|p| {
                    !p.starts_with(workspace.join("target"))
                        && !p.to_string_lossy().contains("/target/")
                        && !p.to_string_lossy().contains("/toolchains/")
                })
                .collect();
            if kept.is_empty() {
                build.env_remove(&k);
            } else {
                build.env(&k, std::env::join_paths(kept).expect("paths"));
            }
        }
    }
    let status = build.status().expect("run cargo");
    assert!(status.success(), "building the gateway failed");
    let exe = std::env::current_exe().expect("own path");
    exe.parent().expect("target dir").join("zkgate")
}

#[tokio::main]
async fn main() {
    START.get_or_init(Instant::now);
    let args = Args::parse();
    let only: Vec<String> = args.only.iter().map(|w| w.trim().to_lowercase()).collect();
    for w in &only {
        if !WORKLOADS.iter().any(|k| k.to_lowercase() == *w) {
            eprintln!("unknown workload {w:?}; known: {}", WORKLOADS.join(","));
            std::process::exit(2);
        }
    }
    let selected = |w: &str| only.is_empty() || only.contains(&w.to_lowercase());
    let mut scale = Scale::new(args.quick);
    if let Some(rounds) = args.observe_rounds {
        scale.observe_rounds = rounds.max(1);
    }
    scale.observe_readers = args.observe_reader.clone();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let load_start = env::loadavg();
    let ticks_start = env::cpu_ticks();

    let gateway_bin = gateway_binary(&args);
    phase("starting ZooKeeper, etcd and the gateway");
    let zk = LocalZk::start_standalone(LocalZkOptions {
        // ZooKeeper's own default (and Debian's zoo.cfg); the gateway's default --zk-tick-time.
        tick_time: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("start ZooKeeper: {e}"));
    let zk_addr: std::net::SocketAddr = zk
        .connect_string()
        .parse()
        .expect("a standalone ZooKeeper's connect string is one address");
    let zk_version = four_letter_word(zk_addr, "srvr", Duration::from_secs(5))
        .await
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .map(|l| l.trim_start_matches("Zookeeper version:").trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let etcd = etcd::Etcd::start(&args.etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let gateway = Gateway::start(&gateway_bin, &zk.connect_string(), &args.gateway_args)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    clients::raw_prepare(&zk.connect_string()).await;

    let mut ctx = workloads::Ctx {
        targets: [
            Target::Zkgate(gateway.url()),
            Target::Etcd(etcd.url().to_owned()),
            Target::Raw(zk.connect_string()),
        ],
        zk_addr,
        zk_pid: zk.pid(0),
        etcd_addr: etcd
            .url()
            .trim_start_matches("http://")
            .parse()
            .expect("etcd address"),
        gateway,
        gateway_bin: gateway_bin.clone(),
        scale: scale.clone(),
        report: report::Report::default(),
    };

    phase("warm-up");
    workloads::warm_up(&mut ctx).await;
    if selected("W1") {
        workloads::w1(&mut ctx).await;
    }
    if selected("W2") {
        workloads::w2(&mut ctx).await;
    }
    if selected("W3") {
        workloads::w3(&mut ctx).await;
    }
    if selected("W4") {
        workloads::w4(&mut ctx).await;
    }
    if selected("W5") {
        workloads::w5(&mut ctx).await;
    }
    if selected("observe") {
        workloads::observe(&mut ctx).await;
    }
    if selected("streams") {
        workloads::streams(&mut ctx).await;
    }

    let (cpu, cores, mem_gib) = env::machine();
    let meta = report::Meta {
        command: format!(
            "cargo run --release -p zkgate-bench --{}",
            command
                .split_once(' ')
                .map_or(String::new(), |(_, rest)| format!(" {rest}"))
        ),
        date: env::version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        cpu,
        cores,
        mem_gib,
        load_start,
        load_end: env::loadavg(),
        steal: env::steal_since(ticks_start),
        zookeeper: zk_version,
        etcd: etcd.version().to_owned(),
        rustc: env::version_of("rustc", &["--version"]),
        gateway: env::version_of(gateway_bin.to_str().unwrap_or("zkgate"), &["--version"]),
        gateway_args: args.gateway_args.clone(),
        git: env::version_of("git", &["describe", "--always", "--dirty"]),
        quick: args.quick,
        only: args.only.clone(),
        scale,
        seconds: START.get().expect("set").elapsed().as_secs_f64(),
    };
    let report = std::mem::take(&mut ctx.report);
    println!();
    print!("{}", stats::text_table(&report.rows));
    report.write(&meta, &args);

    ctx.gateway.stop().await;
    etcd.shutdown().await;
    zk.shutdown().await;
}
