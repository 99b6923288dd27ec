//! Coverage and verdict reporting shared by `fuzz` and `replay`.

use crate::case::Case;
use crate::engine::EngineKind;
use crate::oracle::{CaseReport, OracleKind, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What a campaign covered: cases per pattern, dtype, rank, mode, feature, and per-oracle
/// pass/skip/fail counts.
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    pub cases: u64,
    pub failures: u64,
    pub per_pattern: BTreeMap<&'static str, u64>,
    pub per_dtype: BTreeMap<String, u64>,
    pub per_rank: BTreeMap<usize, u64>,
    /// Mode -> checks made in it (any oracle).
    pub per_mode: BTreeMap<String, u64>,
    pub per_feature: BTreeMap<&'static str, u64>,
    /// Oracle -> [pass, skip, fail].
    pub per_oracle: BTreeMap<OracleKind, [u64; 3]>,
    /// Skip reasons, counted (the first line of each).
    pub skip_reasons: BTreeMap<String, u64>,
    /// Per engine: cases it ran, and the cases it skipped counted by reason.
    pub per_engine: BTreeMap<EngineKind, EngineCount>,
    /// Random graphs: generator op -> nodes drawn (`patterns::random`).
    pub random_ops: BTreeMap<&'static str, u64>,
}

/// One engine's share of a campaign.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineCount {
    pub ran: u64,
    /// `xnn_invoke_runtime` calls (real XNNPACK only).
    pub invocations: u64,
    /// Skipped cases by reason (its first line, shortened).
    pub skipped: BTreeMap<String, u64>,
}

/// A reason's first line, at most `n` characters.
fn short(reason: &str, n: usize) -> String {
    reason.lines().next().unwrap_or("").chars().take(n).collect()
}

impl Coverage {
    /// Adds another worker's counts.
    pub fn merge(&mut self, o: &Coverage) {
        fn add<K: Ord + Clone>(a: &mut BTreeMap<K, u64>, b: &BTreeMap<K, u64>) {
            for (k, v) in b {
                *a.entry(k.clone()).or_default() += v;
            }
        }
        self.cases += o.cases;
        self.failures += o.failures;
        add(&mut self.per_pattern, &o.per_pattern);
        add(&mut self.per_dtype, &o.per_dtype);
        add(&mut self.per_rank, &o.per_rank);
        add(&mut self.per_mode, &o.per_mode);
        add(&mut self.per_feature, &o.per_feature);
        add(&mut self.skip_reasons, &o.skip_reasons);
        add(&mut self.random_ops, &o.random_ops);
        for (k, v) in &o.per_engine {
            let e = self.per_engine.entry(*k).or_default();
            e.ran += v.ran;
            e.invocations += v.invocations;
            add(&mut e.skipped, &v.skipped);
        }
        for (k, v) in &o.per_oracle {
            let e = self.per_oracle.entry(*k).or_default();
            for i in 0..3 {
                e[i] += v[i];
            }
        }
    }

    pub fn record(&mut self, case: &Case, report: &CaseReport) {
        self.cases += 1;
        if report.failed() {
            self.failures += 1;
        }
        *self.per_pattern.entry(case.pattern.name()).or_default() += 1;
        *self.per_dtype.entry(case.dtype.to_string()).or_default() += 1;
        *self.per_rank.entry(case.shape.len()).or_default() += 1;
        for n in case.graph.iter().flat_map(|g| &g.nodes) {
            *self.random_ops.entry(n.op.name()).or_default() += 1;
        }
        let mut features = vec![];
        if case.format != reference::MemoryFormat::Contiguous {
            features.push("channels_last");
        }
        if !case.dynamic.is_empty() {
            features.push("dynamic");
        }
        if case.specials {
            features.push("specials");
        }
        if case.invalid.is_some() {
            features.push("invalid");
        }
        if case.mean_dtype.is_some() {
            features.push("dtype_arg");
        }
        if case.keepdim {
            features.push("keepdim");
        }
        if case.dims.is_empty() && case.pattern.free_dims() {
            features.push("empty_dims");
        }
        if case.dims.iter().any(|&d| d < 0) {
            features.push("negative_dims");
        }
        for f in features {
            *self.per_feature.entry(f).or_default() += 1;
        }
        for (k, u) in &report.engines {
            let e = self.per_engine.entry(*k).or_default();
            e.invocations += u.invocations;
            if u.ran {
                e.ran += 1;
            } else if let Some(why) = &u.skipped {
                *e.skipped.entry(short(why, 100)).or_default() += 1;
            }
        }
        let mut modes_seen = std::collections::BTreeSet::new();
        for c in &report.checks {
            let slot = match &c.verdict {
                Verdict::Pass => 0,
                Verdict::Skip(reason) => {
                    let first = reason.lines().next().unwrap_or("").chars().take(90).collect::<String>();
                    let engine = c.engine.map_or(String::new(), |e| format!(" [{}]", e.name()));
                    *self.skip_reasons.entry(format!("{}{engine}: {first}", c.oracle.name())).or_default() += 1;
                    1
                }
                Verdict::Fail { .. } => 2,
            };
            self.per_oracle.entry(c.oracle).or_default()[slot] += 1;
            if c.scope != "case" && c.scope != "reference" && c.scope != "gap_modes" {
                modes_seen.insert(c.scope.clone());
            }
        }
        for m in modes_seen {
            *self.per_mode.entry(m).or_default() += 1;
        }
    }

    /// The end-of-run summary table.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let line = |s: &mut String, name: &str, items: Vec<(String, u64)>| {
            let body: Vec<String> = items.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  {name:<9} {}", body.join(", "));
        };
        line(&mut s, "pattern", self.per_pattern.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        line(&mut s, "dtype", self.per_dtype.iter().map(|(k, v)| (k.clone(), *v)).collect());
        line(&mut s, "rank", self.per_rank.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        line(&mut s, "mode", self.per_mode.iter().map(|(k, v)| (k.clone(), *v)).collect());
        line(&mut s, "features", self.per_feature.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        let random = self.per_pattern.get("random").copied().unwrap_or(0);
        if random > 0 {
            // The random graphs' share of the cases, and the generator ops they drew.
            let share = 100.0 * random as f64 / self.cases.max(1) as f64;
            let ops: Vec<String> = self.random_ops.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(s, "  {:<9} {random} cases ({share:.1}%), nodes: {}", "random", ops.join(", "));
        }
        let _ = writeln!(s, "  {:<9} {:>10} {:>10} {:>10}", "oracle", "pass", "skip", "fail");
        for o in OracleKind::ALL {
            let [p, k, f] = self.per_oracle.get(&o).copied().unwrap_or_default();
            if o == OracleKind::Panic && f == 0 {
                continue;
            }
            let _ = writeln!(s, "  {:<9} {p:>10} {k:>10} {f:>10}", o.name());
        }
        for (k, e) in &self.per_engine {
            let skipped: u64 = e.skipped.values().sum();
            let runs =
                if *k == EngineKind::Xnnpack { format!(" ({} delegate runs)", e.invocations) } else { String::new() };
            let _ = writeln!(s, "  {:<9} {}: ran {} cases{runs}, skipped {skipped}", "engine", k.name(), e.ran);
            let mut reasons: Vec<_> = e.skipped.iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(a.1));
            for (r, n) in reasons.into_iter().take(5) {
                let _ = writeln!(s, "    {n:>8}  {r}");
            }
        }
        if !self.skip_reasons.is_empty() {
            let mut reasons: Vec<_> = self.skip_reasons.iter().collect();
            reasons.sort_by(|a, b| b.1.cmp(a.1));
            let _ = writeln!(s, "  top skip reasons:");
            for (r, n) in reasons.into_iter().take(5) {
                let _ = writeln!(s, "    {n:>8}  {r}");
            }
        }
        s
    }
}

/// Every check of a case, one per line, with the full detail of failures.
pub fn verdicts(report: &CaseReport) -> String {
    let mut s = String::new();
    for c in &report.checks {
        let scope = match c.engine {
            Some(e) => format!("{} [{}]", c.scope, e.name()),
            None => c.scope.clone(),
        };
        match &c.verdict {
            Verdict::Pass => {
                let _ = writeln!(s, "  PASS  {:<10} {scope}", c.oracle.name());
            }
            Verdict::Skip(r) => {
                let _ = writeln!(s, "  skip  {:<10} {scope}: {r}", c.oracle.name());
            }
            Verdict::Fail { kind, detail } => {
                let _ = writeln!(s, "  FAIL  {:<10} {scope}: {}/{kind}", c.oracle.name(), c.oracle.name());
                for l in detail.lines() {
                    let _ = writeln!(s, "        {l}");
                }
            }
        }
    }
    s
}
