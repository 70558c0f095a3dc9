//! The results: rows for the table, latency summaries, the gateway's ZooKeeper requests per
//! operation, and writing them as JSON, SVG figures and BENCHMARKS.md.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::stats::{self, Better, Row, Summary, SYSTEMS};
use crate::{svg, Args, Scale};

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Full latency summaries (p50/p90/p99/mean/max) behind each latency row.
    pub latencies: Vec<Latency>,
    /// The gateway's ZooKeeper requests per operation, by `zkgate_zk_requests_total{op}`.
    pub gateway_zk_requests: Vec<(String, BTreeMap<String, f64>)>,
    pub extras: BTreeMap<String, serde_json::Value>,
    /// Samples kept for the CDF figures (ms), keyed by figure name.
    #[serde(skip)]
    pub cdfs: Vec<(String, String, [Vec<f64>; 3])>,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub workload: String,
    pub label: String,
    pub zkgate: Summary,
    pub etcd: Summary,
    pub raw_zk: Summary,
}

/// When and where the run happened.
#[derive(Debug, Serialize)]
pub struct Meta {
    pub command: String,
    pub date: String,
    pub cpu: String,
    pub cores: usize,
    pub mem_gib: f64,
    pub load_start: [f64; 3],
    pub load_end: [f64; 3],
    /// The share of the machine's CPU time the hypervisor gave to other machines during the
    /// run (`steal`, /proc/stat).
    pub steal: f64,
    pub zookeeper: String,
    pub etcd: String,
    pub rustc: String,
    pub gateway: String,
    /// Flags given to `zkgate serve` beyond its defaults.
    pub gateway_args: Vec<String>,
    pub git: String,
    pub quick: bool,
    pub only: Vec<String>,
    pub scale: Scale,
    pub seconds: f64,
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

/// `to` relative to directory `from` (both absolute, or both relative to the same place).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let norm = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    v.pop();
                }
                Component::Normal(x) => v.push(x.to_string_lossy().into_owned()),
                _ => {}
            }
        }
        v
    };
    let (f, t) = (norm(from), norm(to));
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().expect("cwd").join(p)
    }
}

impl Report {
    /// A latency row (p50) and its full summary; `cdf` keeps the samples for a figure.
    pub fn latency(
        &mut self,
        workload: &str,
        label: &str,
        samples: &[Vec<Duration>; 3],
        cdf: bool,
    ) {
        let s = [0, 1, 2].map(|i| Summary::of(&samples[i]));
        self.rows.push(
            Row::new(workload, &format!("{label}, p50"), "ms", Better::Lower)
                .values(s.map(|x| (x.n > 0).then_some(x.p50_ms))),
        );
        self.latencies.push(Latency {
            workload: workload.into(),
            label: label.into(),
            zkgate: s[0],
            etcd: s[1],
            raw_zk: s[2],
        });
        if cdf {
            let ms = [0, 1, 2].map(|i| {
                samples[i]
                    .iter()
                    .map(|d| d.as_secs_f64() * 1e3)
                    .collect::<Vec<_>>()
            });
            self.cdfs.push((
                format!("{workload} {label}"),
                slug(&format!("{workload} {label} cdf")),
                ms,
            ));
        }
    }

    pub fn requests_per_op(&mut self, what: &str, requests: &BTreeMap<String, f64>, ops: f64) {
        let per: BTreeMap<String, f64> = requests
            .iter()
            .filter(|(op, v)| **v > 0.0 && op.as_str() != "probe")
            .map(|(op, v)| (op.clone(), v / ops))
            .collect();
        self.gateway_zk_requests.push((what.into(), per));
    }

    /// A figure only zkgate has (fan-out, memory): a row of the "extra" workload, lower is
    /// better.
    pub fn zkgate_only(&mut self, label: &str, unit: &str, value: f64) {
        self.rows
            .push(Row::new("extra", label, unit, Better::Lower).values([Some(value), None, None]));
    }

    pub fn extra(&mut self, key: &str, v: serde_json::Value) {
        self.extras.insert(key.into(), v);
    }

    fn row(&self, workload: &str, label_start: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.workload == workload && r.label.starts_with(label_start))
    }

    /// The figures: name → SVG.
    fn figures(&self) -> Vec<(String, String, String)> {
        let mut figs = Vec::new();
        let group = |rows: Vec<&Row>| -> Vec<(String, [Option<f64>; 3])> {
            rows.into_iter()
                .map(|r| {
                    (
                        r.label
                            .trim_end_matches(", p50")
                            .trim_end_matches(": acquisitions/s")
                            .to_owned(),
                        [r.zkgate, r.etcd, r.raw_zk],
                    )
                })
                .collect()
        };
        let pick = |w: &str, unit: &str, contains: &str| -> Vec<&Row> {
            self.rows
                .iter()
                .filter(|r| r.workload == w && r.unit == unit && r.label.contains(contains))
                .collect()
        };
        let w1 = pick("W1", "ms", "p50");
        if !w1.is_empty() {
            figs.push((
                "w1_acquire".to_owned(),
                "W1: acquire latency, p50".to_owned(),
                svg::bars(
                    "W1: acquire latency (p50, lower is better)",
                    "ms",
                    &group(w1),
                ),
            ));
        }
        let w2 = pick("W2", "ms", "p50");
        if !w2.is_empty() {
            figs.push((
                "w2_handoff".to_owned(),
                "W2: handoff latency, p50".to_owned(),
                svg::bars(
                    "W2: handoff latency (p50, lower is better)",
                    "ms",
                    &group(w2),
                ),
            ));
        }
        let mut tp = pick("W3", "/s", "");
        tp.extend(pick("W4", "/s", ""));
        if !tp.is_empty() {
            figs.push((
                "throughput".to_owned(),
                "W3 and W4: acquisitions per second".to_owned(),
                svg::bars(
                    "W3, W4: acquisitions per second (higher is better)",
                    "/s",
                    &group(tp),
                ),
            ));
        }
        let w5 = pick("W5", "ms", "");
        if !w5.is_empty() {
            figs.push((
                "w5".to_owned(),
                "W5: enqueue and failover with many waiting candidates".to_owned(),
                svg::bars(
                    "W5: many waiting candidates (lower is better)",
                    "ms",
                    &group(w5),
                ),
            ));
        }
        for (title, name, samples) in &self.cdfs {
            figs.push((
                name.clone(),
                format!("{title}: distribution"),
                svg::cdf(&format!("{title} (CDF)"), samples),
            ));
        }
        figs
    }

    /// Issue 21's targets, as ratios of this run: (target, measured, met).
    fn targets(&self) -> Vec<(String, String, Option<bool>)> {
        let mut t = Vec::new();
        let ratio =
            |r: Option<&Row>, other: fn(&Row) -> Option<f64>| r.and_then(|r| r.ratio(other(r)));
        let raw = |r: &Row| r.raw_zk;
        let mut check = |name: &str, v: Option<f64>, ok: fn(f64) -> bool| {
            t.push((name.to_owned(), stats::fmt_ratio(v), v.map(ok)));
        };
        // Issue 21's targets, as ratios to the raw recipe in this run.
        for k in ["election", "lock"] {
            for case in ["fresh names", "one name reused"] {
                check(
                    &format!("W1 {k} acquire p50, {case} ≤ 1.0× raw ZK"),
                    ratio(self.row("W1", &format!("{k} acquire, {case}")), raw),
                    |v| v <= 1.0,
                );
            }
        }
        for w in [150, 20] {
            check(
                &format!("W2 handoff, waiter queued {w} ms earlier ≤ 1.0× raw ZK"),
                ratio(
                    self.row("W2", &format!("handoff to a waiter queued {w} ms")),
                    raw,
                ),
                |v| v <= 1.0,
            );
        }
        let w3 = self.row("W3", "16 clients on one lock: acquisitions/s");
        check("W3 acquisitions/s ≥ 1.5× raw ZK", ratio(w3, raw), |v| {
            v >= 1.5
        });
        let w4 = self.row("W4", "64 clients on their own locks: acquisitions/s");
        check("W4 acquisitions/s ≥ 1.5× raw ZK", ratio(w4, raw), |v| {
            v >= 1.5
        });
        // ZooKeeper's CPU per acquisition: its CPU share over the acquisitions per second.
        let per_acquisition =
            |cpu: Option<&Row>, rate: Option<&Row>, f: fn(&Row) -> Option<f64>| {
                cpu.and_then(f)
                    .zip(rate.and_then(f))
                    .filter(|(_, r)| *r > 0.0)
                    .map(|(c, r)| c / r)
            };
        let w4_cpu = self.row("W4", "64 clients on their own locks: ZooKeeper CPU");
        let zk_cpu = per_acquisition(w4_cpu, w4, |r| r.zkgate)
            .zip(per_acquisition(w4_cpu, w4, |r| r.raw_zk))
            .map(|(z, w)| z / w);
        check(
            "W4 ZooKeeper CPU per acquisition ≤ 0.5× raw ZK's",
            zk_cpu,
            |v| v <= 0.5,
        );
        // Fsyncs per acquisition no more than the recipe's, in every workload.
        let fsyncs = self
            .rows
            .iter()
            .filter(|r| r.label.starts_with("fsyncs per") || r.label.contains(": fsyncs per"))
            .map(|r| {
                (
                    format!("{} {} ≤ raw ZK's", r.workload, r.label),
                    format!(
                        "{} vs {}",
                        stats::fmt_value(r.zkgate, ""),
                        stats::fmt_value(r.raw_zk, "")
                    ),
                    r.zkgate.zip(r.raw_zk).map(|(z, w)| z <= w + 0.05),
                )
            })
            .collect::<Vec<_>>();
        t.extend(fsyncs);
        // Issue 21: 100,000 waiting streams at ≤ 10 KiB each; a leader change seen by the last
        // of 10,000 observers within 50 ms.
        if let Some(r) = self
            .rows
            .iter()
            .find(|r| r.label.contains("memory per stream"))
        {
            t.push((
                "waiting streams ≤ 10 KiB each".to_owned(),
                stats::fmt_value(r.zkgate, "KiB"),
                r.zkgate.map(|v| v <= 10.0),
            ));
        }
        if let Some(r) = self.rows.iter().find(|r| {
            r.label
                .starts_with("Observe fan-out: leader change → last of")
        }) {
            t.push((
                "Observe fan-out to the last observer, p50 ≤ 50 ms".to_owned(),
                stats::fmt_value(r.zkgate, "ms"),
                r.zkgate.map(|v| v <= 50.0),
            ));
        }
        t
    }

    /// Writes the JSON, the figures and (with `--out`) the Markdown report.
    pub fn write(&self, meta: &Meta, args: &Args) {
        if let Some(dir) = args.json.parent() {
            std::fs::create_dir_all(dir).expect("create the results directory");
        }
        let json = serde_json::json!({ "meta": meta, "report": self });
        std::fs::write(
            &args.json,
            serde_json::to_string_pretty(&json).expect("JSON") + "\n",
        )
        .expect("write the JSON results");
        eprintln!("wrote {}", args.json.display());
        std::fs::create_dir_all(&args.figures).expect("create the figures directory");
        // The directory holds this run's figures only: those of workloads not run are removed.
        if let Ok(entries) = std::fs::read_dir(&args.figures) {
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "svg") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let figures = self.figures();
        for (name, _, svg) in &figures {
            std::fs::write(args.figures.join(format!("{name}.svg")), svg).expect("write a figure");
        }
        eprintln!(
            "wrote {} figures into {}",
            figures.len(),
            args.figures.display()
        );
        let Some(out) = &args.out else { return };
        let out_dir = absolute(out)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let fig_dir = relative(&out_dir, &absolute(&args.figures));
        let md = self.markdown(meta, &figures, &fig_dir);
        std::fs::write(out, md).expect("write the report");
        eprintln!("wrote {}", out.display());
    }

    fn markdown(
        &self,
        meta: &Meta,
        figures: &[(String, String, String)],
        fig_dir: &Path,
    ) -> String {
        let mut md = String::new();
        let load = |l: [f64; 3]| format!("{:.2} / {:.2} / {:.2}", l[0], l[1], l[2]);
        md.push_str("# Benchmarks: zkgate, etcd and the raw ZooKeeper recipe\n\n");
        md.push_str(
            "Written by `zkgate-bench` (bench/README.md says what each workload does and how it \
             is measured). All figures come from **one run on one machine**; compare the systems \
             by the ratios within this run, not with runs elsewhere.\n\n",
        );
        md.push_str(&format!("```sh\n{}\n```\n\n", meta.command));
        md.push_str("| | |\n|---|---|\n");
        md.push_str(&format!("| date | {} |\n", meta.date));
        md.push_str(&format!(
            "| machine | {} cores ({}), {:.1} GiB memory |\n",
            meta.cores, meta.cpu, meta.mem_gib
        ));
        md.push_str(&format!(
            "| load average (1 / 5 / 15 min) | {} at the start, {} at the end |\n",
            load(meta.load_start),
            load(meta.load_end)
        ));
        md.push_str(&format!(
            "| CPU time taken by the host for other machines (steal) | {:.0} % of the run |\n",
            meta.steal * 100.0
        ));
        md.push_str(&format!(
            "| ZooKeeper | {} (standalone, tickTime 2 s) |\n",
            meta.zookeeper
        ));
        md.push_str(&format!("| etcd | {} (single member) |\n", meta.etcd));
        let flags = if meta.gateway_args.is_empty() {
            "with default flags, 1 ZooKeeper session".to_owned()
        } else {
            format!("with `{}`", meta.gateway_args.join(" "))
        };
        md.push_str(&format!(
            "| zkgate | {} (release build, `zkgate serve` {flags}), commit {} |\n",
            meta.gateway, meta.git
        ));
        md.push_str(&format!("| rustc | {} |\n", meta.rustc));
        md.push_str(&format!(
            "| scale | {} rounds per W1 case; W2 {} / {} rounds (150 / 20 ms); W3, W4 {} s each; W5 {} candidates, {} failovers; {} observers; {} streams{} |\n",
            meta.scale.w1_rounds,
            meta.scale.w2_rounds_150ms,
            meta.scale.w2_rounds_20ms,
            meta.scale.throughput_secs,
            meta.scale.w5_candidates,
            meta.scale.w5_failovers,
            meta.scale.observers,
            meta.scale.streams,
            if meta.quick { " (`--quick`)" } else { "" }
        ));
        md.push_str(&format!("| duration | {:.0} s |\n\n", meta.seconds));
        let avg = meta.load_start[0].max(meta.load_end[0]);
        if avg > (meta.cores as f64) * 0.5 || meta.steal > 0.05 {
            md.push_str(&format!(
                "**The machine was shared and busy** (load average up to {avg:.1} on {} cores, \
                 {:.0} % of the CPU time taken by the host): absolute times are inflated and \
                 noisy; the ratios between the systems, measured interleaved in the same run, \
                 are what this report is for.\n\n",
                meta.cores,
                meta.steal * 100.0
            ));
        }
        md.push_str("## Results\n\n");
        md.push_str(
            "Ratios are zkgate's figure over the other system's: for times and counts above 1× \
             means zkgate is slower or does more; for acquisitions/s above 1× means zkgate does \
             more. Counts are per operation, from ZooKeeper's `mntr` (fsyncs: \
             `zk_cnt_fsynctime`; notifications: the `zk_sum_node_*_watch_count` counters) and \
             etcd's `/metrics` (`etcd_disk_wal_fsync_duration_seconds_count`). \
             Latency rows are medians; the p90/p99 are below.\n\n",
        );
        md.push_str(&stats::markdown_table(&self.rows));
        md.push('\n');
        let targets = self.targets();
        if !targets.is_empty() {
            md.push_str(
                "## Issue 21's targets in this run\n\n| target | measured | met |\n|---|---|---|\n",
            );
            for (name, v, ok) in &targets {
                let ok = match ok {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "–",
                };
                md.push_str(&format!("| {name} | {v} | {ok} |\n"));
            }
            md.push('\n');
        }
        if !figures.is_empty() {
            md.push_str("## Figures\n\n");
            for (name, alt, _) in figures {
                let path = fig_dir.join(format!("{name}.svg"));
                md.push_str(&format!("![{alt}]({})\n\n", path.display()));
            }
        }
        if !self.latencies.is_empty() {
            md.push_str("## Latency distributions\n\n| workload | case | system | n | p50 | p90 | p99 | max |\n|---|---|---|---:|---:|---:|---:|---:|\n");
            for l in &self.latencies {
                for (sys, s) in SYSTEMS.iter().zip([l.zkgate, l.etcd, l.raw_zk]) {
                    let f = |v: f64| stats::fmt_value(Some(v), "ms");
                    md.push_str(&format!(
                        "| {} | {} | {sys} | {} | {} | {} | {} | {} |\n",
                        l.workload,
                        l.label,
                        s.n,
                        f(s.p50_ms),
                        f(s.p90_ms),
                        f(s.p99_ms),
                        f(s.max_ms)
                    ));
                }
            }
            md.push('\n');
        }
        if !self.gateway_zk_requests.is_empty() {
            md.push_str(
                "## What the gateway asks ZooKeeper per operation\n\n\
                 From the gateway's own `/metrics` (`zkgate_zk_requests_total` by `op`, all \
                 results; the liveness probe left out).\n\n| operation | requests |\n|---|---|\n",
            );
            for (what, per) in &self.gateway_zk_requests {
                let list: Vec<String> = per.iter().map(|(op, v)| format!("{op} {v:.2}")).collect();
                md.push_str(&format!("| {what} | {} |\n", list.join(", ")));
            }
            md.push('\n');
        }
        md.push_str(
            "## How to read this\n\n\
             - Every workload runs zkgate, etcd and raw ZK under the same rules and in that order; \
             W1 and W2 interleave the three in blocks (10 rounds in W1, one round in W2), W3 and \
             W4 in three slices each, so a change in the machine's load falls on all three.\n\
             - zkgate is measured through its gRPC API as a client sees it; etcd through its \
             v3election/v3lock gRPC API (each client on its own lease); raw ZK is the \
             `EPHEMERAL_SEQUENTIAL` + predecessor-watch recipe over one ZooKeeper session per \
             client, creating its own parent (a container znode) on a fresh name.\n\
             - All three keep their default durability: ZooKeeper and etcd fsync their logs \
             before they acknowledge a write, on the same file system.\n\
             - Counts per operation include whatever else the system did meanwhile (the \
             gateway's background work, ZooKeeper's container reaper, once a minute), so read \
             them to the nearest whole number.\n\
             - The load generator, ZooKeeper, etcd and the gateway share the machine's cores.\n",
        );
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_for_figure_links() {
        assert_eq!(
            relative(Path::new("/w/repo"), Path::new("/w/repo/bench/figures")),
            PathBuf::from("bench/figures")
        );
        assert_eq!(
            relative(
                Path::new("/w/repo/bench/../docs"),
                Path::new("/w/repo/bench/figures")
            ),
            PathBuf::from("../bench/figures")
        );
        assert_eq!(relative(Path::new("/a"), Path::new("/a")), PathBuf::new());
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(
            slug("W2 handoff to a waiter queued 20 ms earlier cdf"),
            "w2_handoff_to_a_waiter_queued_20_ms_earlier_cdf"
        );
        assert_eq!(
            slug("W1 lock acquire, one name reused"),
            "w1_lock_acquire_one_name_reused"
        );
    }

    #[test]
    fn targets_are_checked_against_the_rows() {
        let mut r = Report::default();
        r.latency(
            "W1",
            "lock acquire, one name reused",
            &[
                vec![Duration::from_millis(2)],
                vec![Duration::from_millis(1)],
                vec![Duration::from_millis(2)],
            ],
            false,
        );
        r.rows.push(
            Row::new(
                "W3",
                "16 clients on one lock: acquisitions/s",
                "/s",
                Better::Higher,
            )
            .values([Some(600.0), Some(100.0), Some(500.0)]),
        );
        let t = r.targets();
        let find = |s: &str| t.iter().find(|(n, _, _)| n.starts_with(s)).unwrap().clone();
        assert_eq!(find("W1 lock acquire p50, one name reused").2, Some(true));
        assert_eq!(find("W1 election acquire p50, fresh").2, None);
        assert_eq!(find("W3 acquisitions/s ≥ 1.5× raw ZK").2, Some(false));
        assert_eq!(find("W4 acquisitions/s ≥ 1.5× raw ZK").2, None);
        // ZooKeeper's CPU per acquisition: 20 % at 1,000/s against 100 % at 2,000/s is 0.4×.
        for (label, z, w) in [
            (
                "64 clients on their own locks: acquisitions/s",
                1000.0,
                2000.0,
            ),
            ("64 clients on their own locks: ZooKeeper CPU", 20.0, 100.0),
        ] {
            r.rows
                .push(Row::new("W4", label, "", Better::Lower).values([Some(z), None, Some(w)]));
        }
        let t = r.targets();
        let find = |s: &str| t.iter().find(|(n, _, _)| n.starts_with(s)).unwrap().clone();
        assert_eq!(find("W4 ZooKeeper CPU per acquisition").1, "0.40×");
        assert_eq!(find("W4 ZooKeeper CPU per acquisition").2, Some(true));
        assert_eq!(find("W4 acquisitions/s ≥ 1.5× raw ZK").2, Some(false));
    }
}
