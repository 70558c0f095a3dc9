//! Summaries of measured samples, the rows of the report and their ratios. No I/O here, so it is
//! unit-tested.

use std::time::Duration;

use serde::Serialize;

/// The systems compared, in the order every workload runs them.
pub const SYSTEMS: [&str; 3] = ["zkgate", "etcd", "raw ZK"];

/// Latency samples summarised in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub max_ms: f64,
}

/// The `q` quantile (0..=1) of `sorted` by the nearest-rank method on `(n-1)·q`, so the p50 of an
/// even count is the upper of the two middle samples' neighbour by rounding (as the earlier
/// bench programs of this project computed it).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize]
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let mean = if ms.is_empty() {
            f64::NAN
        } else {
            ms.iter().sum::<f64>() / ms.len() as f64
        };
        Summary {
            n: ms.len(),
            p50_ms: quantile(&ms, 0.5),
            p90_ms: quantile(&ms, 0.9),
            p99_ms: quantile(&ms, 0.99),
            mean_ms: mean,
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// Whether a smaller or a larger figure is better (times vs. rates); decides how the ratio
/// column reads.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
    /// A count (fsyncs, requests): smaller is cheaper, shown with one decimal.
    Count,
}

/// One line of the comparison: a figure per system (`None`: not measured for that system, or
/// not applicable).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub label: String,
    pub unit: String,
    pub better: Better,
    pub zkgate: Option<f64>,
    pub etcd: Option<f64>,
    pub raw_zk: Option<f64>,
}

impl Row {
    pub fn new(workload: &str, label: &str, unit: &str, better: Better) -> Row {
        Row {
            workload: workload.into(),
            label: label.into(),
            unit: unit.into(),
            better,
            zkgate: None,
            etcd: None,
            raw_zk: None,
        }
    }

    pub fn values(mut self, v: [Option<f64>; 3]) -> Row {
        [self.zkgate, self.etcd, self.raw_zk] = v;
        self
    }

    /// zkgate's figure over `other`'s: for times and counts above 1 means zkgate is slower or
    /// costlier; for rates above 1 means zkgate does more.
    pub fn ratio(&self, other: Option<f64>) -> Option<f64> {
        match (self.zkgate, other) {
            (Some(z), Some(o)) if o != 0.0 && z.is_finite() && o.is_finite() => Some(z / o),
            _ => None,
        }
    }
}

/// A figure as the table shows it: milliseconds with two decimals below 10 and one above,
/// seconds for large times, rates and counts rounded.
pub fn fmt_value(v: Option<f64>, unit: &str) -> String {
    let Some(v) = v else {
        return "–".into();
    };
    if !v.is_finite() {
        return "–".into();
    }
    match unit {
        "ms" if v >= 10_000.0 => format!("{:.2} s", v / 1000.0),
        "ms" if v >= 100.0 => format!("{v:.0} ms"),
        "ms" if v >= 10.0 => format!("{v:.1} ms"),
        "ms" => format!("{v:.2} ms"),
        "s" => format!("{v:.2} s"),
        "KiB" => format!("{v:.1} KiB"),
        "/s" => format!("{}/s", thousands(v.round() as u64)),
        "" => format!("{v:.1}"),
        u => format!("{v:.1} {u}"),
    }
}

/// `12345` → `12,345`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:.2}×"),
        None => "–".into(),
    }
}

/// The comparison as a Markdown table: one column per system, then zkgate / raw ZK and
/// zkgate / etcd.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | figure | zkgate | etcd | raw ZK | zkgate / raw ZK | zkgate / etcd |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.workload,
            r.label,
            fmt_value(r.zkgate, &r.unit),
            fmt_value(r.etcd, &r.unit),
            fmt_value(r.raw_zk, &r.unit),
            fmt_ratio(r.ratio(r.raw_zk)),
            fmt_ratio(r.ratio(r.etcd)),
        ));
    }
    out
}

/// The same table for a terminal, in fixed-width columns.
pub fn text_table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<5} {:<52} {:>11} {:>11} {:>11} {:>8} {:>8}\n",
        "", "", "zkgate", "etcd", "raw ZK", "/raw ZK", "/etcd"
    );
    for r in rows {
        let mut label = r.label.clone();
        if label.chars().count() > 52 {
            label = label.chars().take(51).collect::<String>() + "…";
        }
        out.push_str(&format!(
            "{:<5} {:<52} {:>11} {:>11} {:>11} {:>8} {:>8}\n",
            r.workload,
            label,
            fmt_value(r.zkgate, &r.unit),
            fmt_value(r.etcd, &r.unit),
            fmt_value(r.raw_zk, &r.unit),
            fmt_ratio(r.ratio(r.raw_zk)),
            fmt_ratio(r.ratio(r.etcd)),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&m| Duration::from_millis(m)).collect()
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let s = Summary::of(&ms(&[5, 1, 4, 2, 3]));
        assert_eq!(s.n, 5);
        assert_eq!(s.p50_ms, 3.0);
        assert_eq!(s.p99_ms, 5.0);
        assert_eq!(s.max_ms, 5.0);
        assert_eq!(s.mean_ms, 3.0);
        // 100 samples 1..=100 ms: p50 is rank round(49.5) = 50 → 51 ms, p90 rank 89 → 90 ms.
        let s = Summary::of(&(1..=100).map(Duration::from_millis).collect::<Vec<_>>());
        assert_eq!(s.p50_ms, 51.0);
        assert_eq!(s.p90_ms, 90.0);
        assert_eq!(s.p99_ms, 99.0);
    }

    #[test]
    fn an_empty_sample_is_not_a_number_not_a_panic() {
        let s = Summary::of(&[]);
        assert_eq!(s.n, 0);
        assert!(s.p50_ms.is_nan());
        assert_eq!(fmt_value(Some(s.p50_ms), "ms"), "–");
    }

    #[test]
    fn ratios_are_zkgate_over_the_other_and_missing_when_either_is() {
        let r = Row::new("W1", "x", "ms", Better::Lower).values([Some(6.0), None, Some(3.0)]);
        assert_eq!(r.ratio(r.raw_zk), Some(2.0));
        assert_eq!(r.ratio(r.etcd), None);
        let zero = Row::new("W3", "y", "/s", Better::Higher).values([Some(1.0), Some(0.0), None]);
        assert_eq!(zero.ratio(zero.etcd), None);
    }

    #[test]
    fn values_are_formatted_by_unit() {
        assert_eq!(fmt_value(Some(1.234), "ms"), "1.23 ms");
        assert_eq!(fmt_value(Some(75.14), "ms"), "75.1 ms");
        assert_eq!(fmt_value(Some(1450.0), "ms"), "1450 ms");
        assert_eq!(fmt_value(Some(14_500.0), "ms"), "14.50 s");
        assert_eq!(fmt_value(Some(6370.4), "/s"), "6,370/s");
        assert_eq!(fmt_value(Some(7.0), ""), "7.0");
        assert_eq!(fmt_value(None, "ms"), "–");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn tables_have_a_line_per_row_and_every_column() {
        let rows = vec![
            Row::new("W1", "lock acquire p50, fresh names", "ms", Better::Lower).values([
                Some(6.07),
                Some(0.91),
                Some(2.79),
            ]),
            Row::new("W4", "64 clients, own locks", "/s", Better::Higher).values([
                Some(1530.0),
                Some(3293.0),
                Some(6370.0),
            ]),
        ];
        let md = markdown_table(&rows);
        assert_eq!(md.lines().count(), 4);
        assert!(md.contains(
            "| W1 | lock acquire p50, fresh names | 6.07 ms | 0.91 ms | 2.79 ms | 2.18× | 6.67× |"
        ));
        assert!(md.contains("| 1,530/s | 3,293/s | 6,370/s | 0.24× | 0.46× |"));
        let text = text_table(&rows);
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().nth(2).unwrap().trim_end().ends_with("0.46×"));
    }
}
