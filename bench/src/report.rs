//! The report math: latency histograms, throughput, duration parsing and the
//! tables printed at the end of a run.
//!
//! Latencies are recorded in microseconds in an HDR histogram (3 significant
//! digits, so a reported percentile is within 0.1 % of the true sample).

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Largest latency a histogram holds: 10 minutes, in microseconds. Longer samples are clamped.
const MAX_MICROS: u64 = 600_000_000;

/// Parses a duration as the CLI takes it: `10s`, `500ms`, `2m`, `1h`, `250us`, or a
/// bare number of seconds (`10`, `2.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 10s, 500ms, 2m)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use us, ms, s, m, h)"
            ))
        }
    };
    let secs = value * scale;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("{text:?} is out of range (0 to 24h)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Counts and latencies of one kind of operation.
#[derive(Clone)]
pub struct OpStats {
    /// Latencies of successful operations, in microseconds.
    pub hist: Histogram<u64>,
    /// Failed operations (transport error, HTTP error, JSON-RPC error or unexpected code).
    pub errors: u64,
    /// The first failure seen, for the report.
    pub first_error: Option<String>,
}

impl Default for OpStats {
    fn default() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .expect("static histogram bounds are valid"),
            errors: 0,
            first_error: None,
        }
    }
}

impl OpStats {
    /// Records one successful operation.
    pub fn ok(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_MICROS);
        self.hist.saturating_record(us);
    }

    /// Records one failure.
    pub fn err(&mut self, why: impl FnOnce() -> String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }

    /// Successful operations.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at quantile `q` (0..=1).
    pub fn quantile(&self, q: f64) -> Duration {
        if self.hist.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.hist.value_at_quantile(q))
    }

    /// The slowest sample.
    pub fn max(&self) -> Duration {
        if self.hist.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.hist.max())
    }

    /// Adds another's samples.
    pub fn merge(&mut self, other: &OpStats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }
}

/// Throughput: operations per second over `elapsed`.
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s <= 0.0 {
        0.0
    } else {
        count as f64 / s
    }
}

/// Per-operation stats of one client (or, merged, of all clients).
#[derive(Default, Clone)]
pub struct Recorder {
    /// By operation name.
    pub ops: BTreeMap<&'static str, OpStats>,
}

impl Recorder {
    /// The stats of one operation, created on first use.
    pub fn op(&mut self, name: &'static str) -> &mut OpStats {
        self.ops.entry(name).or_default()
    }

    /// Adds another recorder's samples.
    pub fn merge(&mut self, other: &Recorder) {
        for (k, v) in &other.ops {
            self.op(k).merge(v);
        }
    }
}

/// A target to compare a measured row against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Target {
    /// Minimum throughput, operations per second.
    pub min_rate: Option<f64>,
    /// Maximum p99.
    pub max_p99: Option<Duration>,
}

impl Target {
    /// Text form, e.g. `≥ 20000/s, p99 ≤ 10 ms`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.min_rate {
            parts.push(format!("≥ {r:.0}/s"));
        }
        if let Some(p) = self.max_p99 {
            parts.push(format!("p99 ≤ {}", fmt_dur(p)));
        }
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(", ")
        }
    }

    /// Whether a row meets it (`None` when there is no target).
    pub fn met(&self, rate: f64, p99: Duration) -> Option<bool> {
        if self.min_rate.is_none() && self.max_p99.is_none() {
            return None;
        }
        Some(self.min_rate.is_none_or(|r| rate >= r) && self.max_p99.is_none_or(|p| p99 <= p))
    }
}

/// One line of the results table.
#[derive(Clone)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Operation name.
    pub op: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Measured stats.
    pub stats: OpStats,
    /// Wall time the operations ran over.
    pub elapsed: Duration,
    /// What it should reach.
    pub target: Target,
}

impl Row {
    /// Throughput of the row.
    pub fn rate(&self) -> f64 {
        rate(self.stats.count(), self.elapsed)
    }
}

/// What one scenario measured.
#[derive(Default, Clone)]
pub struct ScenarioReport {
    /// Scenario name.
    pub name: String,
    /// Rows, one per operation.
    pub rows: Vec<Row>,
    /// Server peak RSS (VmHWM), KiB.
    pub server_peak_rss_kib: Option<u64>,
    /// Bytes the data dir takes on disk.
    pub store_bytes: Option<u64>,
    /// Server CPU seconds (user + system) spent during the measured phase.
    pub server_cpu_s: Option<f64>,
    /// Generator CPU seconds (user + system) spent during the measured phase.
    pub bench_cpu_s: Option<f64>,
    /// Other findings: (what, value, target, verdict).
    pub facts: Vec<Fact>,
}

/// A single measured value with an optional target (the scale scenario's findings).
#[derive(Clone)]
pub struct Fact {
    /// What was measured.
    pub what: String,
    /// The value, formatted.
    pub value: String,
    /// The target, formatted (or `-`).
    pub target: String,
    /// Met or not, when there is a target.
    pub met: Option<bool>,
}

/// `1.23 ms`, `850 µs`, `2.10 s`.
pub fn fmt_dur(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1000 {
        format!("{us} µs")
    } else if us < 1_000_000 {
        format!("{:.2} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// `123.4 MiB`.
pub fn fmt_bytes(b: u64) -> String {
    if b < 1024 * 1024 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else if b < 1024 * 1024 * 1024 {
        format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
    } else {
        format!("{:.2} GiB", b as f64 / (1024.0 * 1024.0 * 1024.0))
    }
}

fn verdict(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "-",
    }
}

/// The results of every scenario as a Markdown table (and the facts table when there are any).
pub fn markdown(reports: &[ScenarioReport]) -> String {
    let mut s = String::new();
    s.push_str("| scenario | operation | clients | ops | errors | ops/s | p50 | p90 | p99 | max | target | verdict | server peak RSS | store on disk | CPU s (server / bench) |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|\n");
    for r in reports {
        for row in &r.rows {
            let st = &row.stats;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                row.scenario,
                row.op,
                row.clients,
                st.count(),
                st.errors,
                row.rate(),
                fmt_dur(st.quantile(0.50)),
                fmt_dur(st.quantile(0.90)),
                fmt_dur(st.quantile(0.99)),
                fmt_dur(st.max()),
                row.target.describe(),
                verdict(row.target.met(row.rate(), st.quantile(0.99))),
                r.server_peak_rss_kib
                    .map(|k| fmt_bytes(k * 1024))
                    .unwrap_or_else(|| "-".into()),
                r.store_bytes.map(fmt_bytes).unwrap_or_else(|| "-".into()),
                match (r.server_cpu_s, r.bench_cpu_s) {
                    (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
                    _ => "-".into(),
                },
            );
        }
    }
    let facts: Vec<(&str, &Fact)> = reports
        .iter()
        .flat_map(|r| r.facts.iter().map(move |f| (r.name.as_str(), f)))
        .collect();
    if !facts.is_empty() {
        s.push_str(
            "\n| scenario | measurement | value | target | verdict |\n|---|---|---:|---|---|\n",
        );
        for (name, f) in facts {
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} |",
                f.what,
                f.value,
                f.target,
                verdict(f.met)
            );
        }
    }
    let errs: Vec<String> = reports
        .iter()
        .flat_map(|r| r.rows.iter())
        .filter_map(|row| {
            row.stats.first_error.as_ref().map(|e| {
                format!(
                    "- {} / {}: {} error(s), first: {e}",
                    row.scenario, row.op, row.stats.errors
                )
            })
        })
        .collect();
    if !errs.is_empty() {
        s.push_str("\nErrors:\n");
        for e in errs {
            s.push_str(&e);
            s.push('\n');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration(" 250us "), Ok(Duration::from_micros(250)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("25h").is_err());
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut s = OpStats::default();
        // 1..=1000 ms, one sample each.
        for ms in 1..=1000u64 {
            s.ok(Duration::from_millis(ms));
        }
        assert_eq!(s.count(), 1000);
        let close = |d: Duration, ms: f64| {
            let got = d.as_secs_f64() * 1000.0;
            assert!((got - ms).abs() <= ms * 0.002, "got {got} ms, want {ms} ms");
        };
        close(s.quantile(0.50), 500.0);
        close(s.quantile(0.90), 900.0);
        close(s.quantile(0.99), 990.0);
        close(s.max(), 1000.0);
        assert_eq!(OpStats::default().quantile(0.99), Duration::ZERO);
    }

    #[test]
    fn merging_adds_samples_and_keeps_the_first_error() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        a.op("status").ok(Duration::from_micros(100));
        b.op("status").ok(Duration::from_micros(300));
        b.op("status").err(|| "boom".into());
        b.op("status").err(|| "second".into());
        a.merge(&b);
        let s = &a.ops["status"];
        assert_eq!(s.count(), 2);
        assert_eq!(s.errors, 2);
        assert_eq!(s.first_error.as_deref(), Some("boom"));
        assert!(s.max() >= Duration::from_micros(299));
    }

    #[test]
    fn throughput_and_targets() {
        assert_eq!(rate(20_000, Duration::from_secs(2)), 10_000.0);
        assert_eq!(rate(5, Duration::ZERO), 0.0);
        let t = Target {
            min_rate: Some(20_000.0),
            max_p99: Some(Duration::from_millis(10)),
        };
        assert_eq!(t.met(25_000.0, Duration::from_millis(9)), Some(true));
        assert_eq!(t.met(25_000.0, Duration::from_millis(11)), Some(false));
        assert_eq!(t.met(19_999.0, Duration::from_millis(1)), Some(false));
        assert_eq!(Target::default().met(1.0, Duration::ZERO), None);
        assert_eq!(t.describe(), "≥ 20000/s, p99 ≤ 10.00 ms");
    }
}
