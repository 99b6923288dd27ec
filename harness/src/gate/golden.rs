//! The golden-table gate: every program of [`crate::programs`] lowered in the three modes,
//! its counts, payload sizes and hashes compared with `corpora/gates/golden.json`.

use super::names::check_node_name;
use super::GateArgs;
use crate::engine::payload::{self as serialize, LoadLimits};
use crate::programs::{self, Family, NamedProgram};
use anyhow::{bail, Context};
use delegate::program::Step;
use delegate::xnn::{XnnGraph, NODE_TYPE_NAMES};
use delegate::LoweringMode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Format version of the golden file.
pub const GOLDEN_VERSION: u32 = 1;

/// The golden table: per pattern, per mode, what the lowering produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Golden {
    pub version: u32,
    pub note: String,
    pub patterns: BTreeMap<String, PatternEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PatternEntry {
    pub description: String,
    pub family: Family,
    /// Keyed by [`LoweringMode::name`].
    pub modes: BTreeMap<String, ModeEntry>,
}

/// What one mode's lowering of one pattern gave.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeEntry {
    /// The lowering's error, when it refused the program (then every count is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub delegates: usize,
    /// Ops left outside, as `op: reason`, in program order.
    pub outside: Vec<String>,
    /// Node counts by schema type name, summed over the delegates' decoded payloads.
    pub nodes: BTreeMap<String, usize>,
    pub transposes: usize,
    pub converts: usize,
    /// Payload size in bytes, per delegate segment.
    pub payload_bytes: Vec<usize>,
    /// sha256 of `serialize::write` of each segment.
    pub sha256: Vec<String>,
}

/// A stored segment graph (constants as a hash), for diffs when a payload hash moves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredGraph {
    pub pattern: String,
    pub mode: String,
    pub segment: usize,
    pub constants_sha256: String,
    pub graph: XnnGraph,
}

/// JSON has no infinities or NaN (serde_json writes them as `null`, which does not read
/// back as f32): the stored copy clamps them to the largest finite value, NaN to 0. Both
/// sides of a diff go through this, so it only hides a change between +inf and f32::MAX.
pub fn json_safe(g: &mut XnnGraph) {
    let fix = |v: &mut f32| {
        if v.is_nan() {
            *v = 0.0;
        } else if v.is_infinite() {
            *v = v.signum() * f32::MAX;
        }
    };
    for n in &mut g.nodes {
        if let Some((lo, hi)) = n.output_min_max.as_mut() {
            fix(lo);
            fix(hi);
        }
    }
    for v in &mut g.values {
        match v.quant.as_mut() {
            Some(delegate::xnn::QuantParams::PerTensor { scale, .. }) => fix(scale),
            Some(delegate::xnn::QuantParams::PerChannel { scale, .. }) => scale.iter_mut().for_each(fix),
            _ => {}
        }
    }
}

/// A freshly computed table plus the segment graphs behind its hashes.
#[derive(Clone, Debug)]
pub struct Computed {
    pub golden: Golden,
    pub graphs: Vec<StoredGraph>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

impl Golden {
    /// Every node type name in the table must be a schema member; also the version.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.version != GOLDEN_VERSION {
            bail!("golden table version {} is not the supported {GOLDEN_VERSION}", self.version);
        }
        for (p, entry) in &self.patterns {
            for (m, e) in &entry.modes {
                if !LoweringMode::ALL.iter().any(|x| x.name() == m) {
                    bail!("pattern {p}: unknown lowering mode {m:?}");
                }
                for name in e.nodes.keys() {
                    check_node_name(name).with_context(|| format!("golden table, pattern {p}, mode {m}"))?;
                }
            }
        }
        Ok(())
    }

    /// Parses and validates a golden file's text.
    pub fn parse(text: &str) -> anyhow::Result<Golden> {
        let g: Golden = serde_json::from_str(text).context("golden table is not valid JSON of the expected form")?;
        g.validate()?;
        Ok(g)
    }

    pub fn load(path: &Path) -> anyhow::Result<Golden> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!("cannot read the golden table {} (create it with `harness gate --bless`)", path.display())
        })?;
        Golden::parse(&text).with_context(|| format!("in {}", path.display()))
    }
}

/// Where the golden table lives when no path is given: the checkout's `corpora/gates/`.
pub fn default_golden_path() -> PathBuf {
    let rel = PathBuf::from("corpora/gates/golden.json");
    if rel.exists() {
        return rel;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora/gates/golden.json")
}

/// The stored graphs file next to a golden file.
pub fn graphs_path(golden: &Path) -> PathBuf {
    golden.with_file_name("graphs.jsonl")
}

/// Lowers one program in one mode and records everything the table pins.
pub fn compute_entry(p: &NamedProgram, graph: &reference::Graph, mode: LoweringMode) -> (ModeEntry, Vec<StoredGraph>) {
    let lowered = match serialize::lower(graph, mode, p.enable_bf16) {
        Ok(l) => l,
        Err(e) => return (ModeEntry { error: Some(e.to_string()), ..Default::default() }, vec![]),
    };
    let s = &lowered.summary;
    let mut e = ModeEntry {
        error: None,
        delegates: s.delegates,
        outside: s.outside.iter().map(|o| format!("{}: {}", o.op, o.reason)).collect(),
        nodes: BTreeMap::new(),
        transposes: s.transposes,
        converts: s.converts,
        payload_bytes: vec![],
        sha256: vec![],
    };
    let mut problems = Vec::new();
    let mut graphs = Vec::new();
    for (k, seg) in lowered
        .steps
        .iter()
        .filter_map(|st| match st {
            Step::Delegate(d) => Some(d),
            Step::Portable(_) => None,
        })
        .enumerate()
    {
        let bytes = serialize::write(&seg.graph);
        e.payload_bytes.push(bytes.len());
        e.sha256.push(sha256_hex(&bytes));
        // Counts come from what the loader reads back, the bytes a runtime would see.
        match serialize::load(&bytes, &LoadLimits::default()) {
            Ok(back) => {
                for (name, n) in serialize::node_counts(&back) {
                    *e.nodes.entry(name).or_insert(0) += n;
                }
            }
            Err(err) => problems.push(format!("segment {k}: the loader rejects the written payload: {err}")),
        }
        let mut g = seg.graph.clone();
        let constants_sha256 = sha256_hex(&g.constant_bytes);
        g.constant_bytes.clear();
        json_safe(&mut g);
        graphs.push(StoredGraph {
            pattern: p.name.clone(),
            mode: mode.name().into(),
            segment: k,
            constants_sha256,
            graph: g,
        });
    }
    if e.nodes != s.node_counts {
        problems.push(format!("summary node counts {:?} differ from the payloads' {:?}", s.node_counts, e.nodes));
    }
    problems.extend(count_api_problems(s));
    if e.delegates != e.payload_bytes.len() {
        problems.push(format!(
            "summary says {} delegates, the program has {} segments",
            e.delegates,
            e.payload_bytes.len()
        ));
    }
    let t = e.nodes.get("XNNStaticTranspose").copied().unwrap_or(0);
    let c = e.nodes.get("XNNConvert").copied().unwrap_or(0);
    if (t, c) != (e.transposes, e.converts) {
        problems.push(format!(
            "summary transposes/converts {}/{} differ from the payloads' {t}/{c}",
            e.transposes, e.converts
        ));
    }
    if !problems.is_empty() {
        e.error = Some(format!("inconsistent lowering: {}", problems.join("; ")));
    }
    (e, graphs)
}

/// Recomputes the table for the catalog (optionally filtered by name substrings).
pub fn compute(only: &[String]) -> anyhow::Result<Computed> {
    let mut golden = Golden {
        version: GOLDEN_VERSION,
        note: "Generated by `harness gate --bless`; do not edit by hand. Counts are read back from the serialized payloads.".into(),
        patterns: BTreeMap::new(),
    };
    let mut graphs = Vec::new();
    let catalog = programs::catalog();
    // A name that matches nothing would gate nothing and pass: a usage error.
    for o in only {
        if !catalog.iter().any(|p| p.name.contains(o.as_str())) {
            let names: Vec<&str> = catalog.iter().take(8).map(|p| p.name.as_str()).collect();
            bail!(
                "--only {o:?} matches no program of the catalog (a substring of a name: {}, ... {} in all)",
                names.join(", "),
                catalog.len()
            );
        }
    }
    for p in catalog {
        if !only.is_empty() && !only.iter().any(|o| p.name.contains(o.as_str())) {
            continue;
        }
        let graph = p.graph().with_context(|| format!("program {} does not build", p.name))?;
        let mut modes = BTreeMap::new();
        for mode in LoweringMode::ALL {
            let (e, g) = compute_entry(&p, &graph, mode);
            modes.insert(mode.name().to_string(), e);
            graphs.extend(g);
        }
        golden
            .patterns
            .insert(p.name.clone(), PatternEntry { description: p.description.clone(), family: p.family, modes });
    }
    Ok(Computed { golden, graphs })
}

/// One changed value: which pattern, which mode, which count, old and new.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub pattern: String,
    pub mode: String,
    pub field: String,
    pub old: String,
    pub new: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pattern {}, mode {}: {} {} -> {}", self.pattern, self.mode, self.field, self.old, self.new)
    }
}

fn flatten(e: &ModeEntry) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("error".into(), e.error.clone().unwrap_or_else(|| "none".into()));
    m.insert("delegates".into(), e.delegates.to_string());
    m.insert("ops outside".into(), format!("{:?}", e.outside));
    for name in NODE_TYPE_NAMES {
        if let Some(n) = e.nodes.get(name) {
            m.insert(format!("node count {name}"), n.to_string());
        }
    }
    for (name, n) in &e.nodes {
        m.entry(format!("node count {name}")).or_insert_with(|| n.to_string());
    }
    m.insert("transposes".into(), e.transposes.to_string());
    m.insert("converts".into(), e.converts.to_string());
    m.insert("segments".into(), e.payload_bytes.len().to_string());
    for (k, b) in e.payload_bytes.iter().enumerate() {
        m.insert(format!("payload bytes [segment {k}]"), b.to_string());
    }
    for (k, h) in e.sha256.iter().enumerate() {
        m.insert(format!("sha256 [segment {k}]"), h.clone());
    }
    m
}

/// Review finding B6: the counter users gate on (`Summary::count`) must give every schema
/// name its count and refuse a misspelled name, never read it as 0 (a gate on
/// `count("XNNStaticTransposee") == 0` would always pass). The counts themselves are checked
/// against the payloads above.
fn count_api_problems(s: &delegate::program::Summary) -> Vec<String> {
    let mut problems = Vec::new();
    for name in NODE_TYPE_NAMES {
        let want = s.node_counts.get(name).copied().unwrap_or(0);
        match s.count(name) {
            Ok(n) if n == want => {}
            Ok(n) => problems.push(format!("Summary::count({name}) = {n}, its node counts say {want}")),
            Err(err) => problems.push(format!("Summary::count refused the schema name {name}: {err}")),
        }
    }
    for bad in ["XNNStaticTransposee", "StaticTranspose", "xnnstaticmean", "XNNGlobalAvgPooling2D", ""] {
        if let Ok(n) = s.count(bad) {
            problems.push(format!("Summary::count({bad:?}) = {n}: a misspelled node type name must be an error"));
        }
    }
    problems
}

/// Every difference between two tables (absent counts read as 0, absent segments as "absent").
pub fn diff(old: &Golden, new: &Golden) -> Vec<Change> {
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> = old.patterns.keys().chain(new.patterns.keys()).collect();
    for name in names {
        let (o, n) = (old.patterns.get(name), new.patterns.get(name));
        let (o, n) = match (o, n) {
            (Some(o), Some(n)) => (o, n),
            (o, n) => {
                out.push(Change {
                    pattern: name.clone(),
                    mode: "*".into(),
                    field: "pattern".into(),
                    old: if o.is_some() { "present" } else { "absent" }.into(),
                    new: if n.is_some() { "present" } else { "absent" }.into(),
                });
                continue;
            }
        };
        for mode in LoweringMode::ALL.iter().map(|m| m.name()) {
            let empty = ModeEntry::default();
            let (fo, fnew) =
                (flatten(o.modes.get(mode).unwrap_or(&empty)), flatten(n.modes.get(mode).unwrap_or(&empty)));
            let keys: std::collections::BTreeSet<&String> = fo.keys().chain(fnew.keys()).collect();
            for k in keys {
                let zero = if k.starts_with("node count") { "0" } else { "absent" };
                let (a, b) =
                    (fo.get(k).map(String::as_str).unwrap_or(zero), fnew.get(k).map(String::as_str).unwrap_or(zero));
                if a != b {
                    out.push(Change {
                        pattern: name.clone(),
                        mode: mode.into(),
                        field: k.clone(),
                        old: a.into(),
                        new: b.into(),
                    });
                }
            }
        }
    }
    out
}

/// Reads the stored graphs file (missing file = no stored graphs).
pub fn load_graphs(path: &Path) -> anyhow::Result<Vec<StoredGraph>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}: line {}", path.display(), i + 1)))
        .collect()
}

/// The decoded-graph diff for each segment whose hash moved.
pub fn hash_diffs(changes: &[Change], old: &[StoredGraph], new: &[StoredGraph]) -> String {
    let mut out = String::new();
    for c in changes.iter().filter(|c| c.field.starts_with("sha256")) {
        let seg: usize = c.field.trim_start_matches("sha256 [segment ").trim_end_matches(']').parse().unwrap_or(0);
        let find = |v: &[StoredGraph]| {
            v.iter().find(|g| g.pattern == c.pattern && g.mode == c.mode && g.segment == seg).cloned()
        };
        let _ = writeln!(out, "decoded-graph diff, pattern {}, mode {}, segment {seg}:", c.pattern, c.mode);
        match (find(old), find(new)) {
            (Some(a), Some(b)) => {
                let d = serialize::diff_graphs(&a.graph, &b.graph);
                for l in d.lines() {
                    let _ = writeln!(out, "    {l}");
                }
                if a.constants_sha256 != b.constants_sha256 {
                    let _ = writeln!(out, "    constant data: sha256 {} -> {}", a.constants_sha256, b.constants_sha256);
                }
                if d.is_empty() && a.constants_sha256 == b.constants_sha256 {
                    let _ = writeln!(out, "    (decoded graphs equal: the change is in the encoding only)");
                }
            }
            (None, _) => {
                let _ = writeln!(out, "    (no stored graph for the old payload)");
            }
            (_, None) => {
                let _ = writeln!(out, "    (the segment no longer exists)");
            }
        }
    }
    out
}

/// Per pattern: transposes and delegates `StaticMean` saves against `Main`, and `NhwcAware`
/// against `StaticMean` (positive = fewer).
pub fn savings_report(g: &Golden) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<30} {:>14} {:>14} {:>14} {:>14}",
        "pattern", "T main/sm/nhwc", "D main/sm/nhwc", "sm saves T/D", "nhwc saves T/D"
    );
    let mut tot = [0i64; 4];
    for (name, p) in &g.patterns {
        let get = |m: LoweringMode| p.modes.get(m.name()).filter(|e| e.error.is_none());
        let (Some(a), Some(b), Some(c)) =
            (get(LoweringMode::Main), get(LoweringMode::StaticMean), get(LoweringMode::NhwcAware))
        else {
            let _ = writeln!(out, "{name:<30} (a mode failed to lower; see the table)");
            continue;
        };
        let d = |x: usize, y: usize| x as i64 - y as i64;
        let s = [
            d(a.transposes, b.transposes),
            d(a.delegates, b.delegates),
            d(b.transposes, c.transposes),
            d(b.delegates, c.delegates),
        ];
        for (t, v) in tot.iter_mut().zip(s) {
            *t += v;
        }
        let _ = writeln!(
            out,
            "{name:<30} {:>14} {:>14} {:>14} {:>14}",
            format!("{}/{}/{}", a.transposes, b.transposes, c.transposes),
            format!("{}/{}/{}", a.delegates, b.delegates, c.delegates),
            format!("{:+}/{:+}", s[0], s[1]),
            format!("{:+}/{:+}", s[2], s[3]),
        );
    }
    let _ = writeln!(
        out,
        "{:<30} {:>14} {:>14} {:>14} {:>14}",
        "total",
        "",
        "",
        format!("{:+}/{:+}", tot[0], tot[1]),
        format!("{:+}/{:+}", tot[2], tot[3])
    );
    out
}

/// Outcome of comparing a recomputed table with the golden one.
pub struct GateOutcome {
    pub changes: Vec<Change>,
    /// Patterns whose lowering is internally inconsistent (summary vs payloads).
    pub inconsistent: Vec<String>,
    /// The whole readable report (diff, hash diffs, savings).
    pub report: String,
    pub computed: Computed,
}

impl GateOutcome {
    pub fn passed(&self) -> bool {
        self.changes.is_empty() && self.inconsistent.is_empty()
    }
}

/// Compares a recomputed table with `golden` (and its stored graphs).
pub fn check_against(golden: &Golden, stored: &[StoredGraph], computed: Computed, filtered: bool) -> GateOutcome {
    let mut old = golden.clone();
    if filtered {
        old.patterns.retain(|k, _| computed.golden.patterns.contains_key(k));
    }
    let changes = diff(&old, &computed.golden);
    let inconsistent: Vec<String> = computed
        .golden
        .patterns
        .iter()
        .flat_map(|(p, e)| {
            e.modes.iter().filter_map(move |(m, x)| {
                x.error
                    .as_deref()
                    .filter(|s| s.starts_with("inconsistent lowering"))
                    .map(|s| format!("pattern {p}, mode {m}: {s}"))
            })
        })
        .collect();
    let mut report = String::new();
    if changes.is_empty() {
        let _ = writeln!(report, "gate: {} patterns x 3 modes match the golden table", computed.golden.patterns.len());
    } else {
        let _ = writeln!(report, "gate: {} change(s) against the golden table:", changes.len());
        for c in &changes {
            let _ = writeln!(report, "  {c}");
        }
        report.push_str(&hash_diffs(&changes, stored, &computed.graphs));
        let _ = writeln!(
            report,
            "If the change is deliberate, accept it with `harness gate --bless` (or `just gate --bless`)."
        );
    }
    for i in &inconsistent {
        let _ = writeln!(report, "  INCONSISTENT {i}");
    }
    let _ = writeln!(report, "\nsavings per pattern (T = transposes, D = delegates):");
    report.push_str(&savings_report(&computed.golden));
    GateOutcome { changes, inconsistent, report, computed }
}

/// Writes `c` as the golden table at `path` (and its graphs next to it).
pub fn bless(path: &Path, c: &Computed) -> anyhow::Result<()> {
    c.golden.validate()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut text = serde_json::to_string_pretty(&c.golden)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    let mut lines = String::new();
    for g in &c.graphs {
        lines.push_str(&serde_json::to_string(g)?);
        lines.push('\n');
    }
    let gp = graphs_path(path);
    std::fs::write(&gp, lines).with_context(|| format!("writing {}", gp.display()))?;
    Ok(())
}

/// `harness gate` without a `.pte` file: check (or `--bless`) the golden table.
pub(super) fn run(args: &GateArgs) -> anyhow::Result<ExitCode> {
    if !(args.max.is_empty()
        && args.min.is_empty()
        && args.forbid.is_empty()
        && args.limits.is_none()
        && args.max_delegates.is_none())
    {
        bail!("--max/--min/--forbid/--limits/--max-delegates need a .pte file argument");
    }
    let path = args.golden.clone().unwrap_or_else(default_golden_path);
    let computed = compute(&args.only)?;
    if args.bless {
        if !args.only.is_empty() {
            bail!("--bless rewrites the whole table; drop --only");
        }
        let old = Golden::load(&path).ok();
        let n = old.as_ref().map(|o| diff(o, &computed.golden).len());
        bless(&path, &computed)?;
        println!(
            "blessed {} patterns x 3 modes into {} ({} changed value(s))",
            computed.golden.patterns.len(),
            path.display(),
            n.map(|n| n.to_string()).unwrap_or_else(|| "new table".into())
        );
        print!("{}", savings_report(&computed.golden));
        return Ok(ExitCode::SUCCESS);
    }
    let golden = Golden::load(&path)?;
    let stored = load_graphs(&graphs_path(&path))?;
    let outcome = check_against(&golden, &stored, computed, !args.only.is_empty());
    print!("{}", outcome.report);
    Ok(if outcome.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_pattern_mode_field_old_new() {
        let mut e = ModeEntry { delegates: 1, transposes: 4, ..Default::default() };
        e.nodes.insert("XNNStaticTranspose".into(), 4);
        let mut modes = BTreeMap::new();
        modes.insert("static_mean".to_string(), e.clone());
        let old = Golden {
            version: GOLDEN_VERSION,
            note: String::new(),
            patterns: [("p".to_string(), PatternEntry { description: String::new(), family: Family::Table, modes })]
                .into_iter()
                .collect(),
        };
        let mut new = old.clone();
        let m = new.patterns.get_mut("p").unwrap().modes.get_mut("static_mean").unwrap();
        m.transposes = 2;
        m.nodes.remove("XNNStaticTranspose");
        let d = diff(&old, &new);
        let lines: Vec<String> = d.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            lines,
            vec![
                "pattern p, mode static_mean: node count XNNStaticTranspose 4 -> 0".to_string(),
                "pattern p, mode static_mean: transposes 4 -> 2".to_string(),
            ]
        );
        assert!(diff(&old, &old).is_empty());
    }
}
