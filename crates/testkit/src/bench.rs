//! What the example benchmarks (`examples/*_bench.rs`) share: their `--name VALUE` command
//! line, the ZooKeeper they run against (`--zk`, else a local standalone server for the run)
//! and the percentiles they print.

use std::time::Duration;

use zkgate_localzk::{LocalZk, LocalZkOptions};

/// A benchmark's command line: `--name VALUE` pairs, read by name.
#[derive(Debug, Clone)]
pub struct BenchArgs(Vec<String>);

impl BenchArgs {
    /// This process's arguments.
    pub fn from_env() -> Self {
        Self(std::env::args().collect())
    }

    /// The value after `name` (e.g. `"--rounds"`), if given.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }
}

/// The ZooKeeper to run against: `--zk HOST:PORT` if given, else a local standalone server
/// started now, which the returned [`LocalZk`] keeps running (hold it for the whole run).
///
/// # Panics
/// If the local server cannot be started.
pub async fn zk_or_local(args: &BenchArgs) -> (String, Option<LocalZk>) {
    match args.get("--zk") {
        Some(zk) => (zk, None),
        None => {
            let local = LocalZk::start_standalone(LocalZkOptions::default())
                .await
                .expect("start ZooKeeper");
            (local.connect_string(), Some(local))
        }
    }
}

/// The `q` quantile (0.0 ..= 1.0) of `sorted` latencies, nearest rank.
///
/// # Panics
/// If `sorted` is empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// The `q` quantile of `sorted` in milliseconds, as the benchmarks print it.
pub fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    percentile(sorted, q).as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        let v: Vec<Duration> = (1..=101).map(ms).collect();
        assert_eq!(percentile(&v, 0.0), ms(1));
        assert_eq!(percentile(&v, 0.5), ms(51));
        assert_eq!(percentile(&v, 0.99), ms(100));
        assert_eq!(percentile(&v, 1.0), ms(101));
        assert_eq!(percentile_ms(&[ms(3)], 0.5), 3.0);
    }

    #[test]
    fn arguments_are_read_by_name() {
        let args = BenchArgs(
            ["bench", "--rounds", "7", "--zk"]
                .map(String::from)
                .to_vec(),
        );
        assert_eq!(args.get("--rounds").as_deref(), Some("7"));
        assert_eq!(args.get("--zk"), None);
        assert_eq!(args.get("--calls"), None);
    }
}
