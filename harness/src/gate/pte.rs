//! The `.pte` limits gate: a real ExecuTorch program's XNNPACK payloads against
//! `--max`/`--min`/`--forbid`/`--max-delegates` or a limits file.

use super::names::check_node_name;
use super::GateArgs;
use crate::engine::payload::{self as serialize, LoadLimits};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// Limits on a real program's XNNPACK payloads, summed over its delegates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default)]
    pub max: BTreeMap<String, usize>,
    #[serde(default)]
    pub min: BTreeMap<String, usize>,
    #[serde(default)]
    pub forbid: Vec<String>,
    #[serde(default)]
    pub max_delegates: Option<usize>,
}

fn parse_pair(s: &str) -> anyhow::Result<(String, usize)> {
    let (name, n) = s.split_once('=').with_context(|| format!("{s:?}: expected NODE=N, e.g. XNNStaticTranspose=2"))?;
    let n: usize = n.trim().parse().with_context(|| format!("{s:?}: {n:?} is not a count"))?;
    Ok((name.trim().to_string(), n))
}

impl Limits {
    /// Merges a limits file and command-line flags, then checks every name.
    pub fn from_args(args: &GateArgs) -> anyhow::Result<Limits> {
        let mut l = match &args.limits {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).with_context(|| format!("reading limits file {}", p.display()))?;
                serde_json::from_str(&text).with_context(|| format!("limits file {} is not valid", p.display()))?
            }
            None => Limits::default(),
        };
        for s in &args.max {
            let (k, v) = parse_pair(s)?;
            l.max.insert(k, v);
        }
        for s in &args.min {
            let (k, v) = parse_pair(s)?;
            l.min.insert(k, v);
        }
        l.forbid.extend(args.forbid.iter().cloned());
        if args.max_delegates.is_some() {
            l.max_delegates = args.max_delegates;
        }
        l.validate()?;
        Ok(l)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        for name in self.max.keys().chain(self.min.keys()).chain(&self.forbid) {
            check_node_name(name)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.max.is_empty() && self.min.is_empty() && self.forbid.is_empty() && self.max_delegates.is_none()
    }

    /// Violations for a program with `delegates` payloads and summed node `counts`.
    pub fn violations(&self, delegates: usize, counts: &BTreeMap<String, usize>) -> Vec<String> {
        let get = |n: &str| counts.get(n).copied().unwrap_or(0);
        let mut v = Vec::new();
        for (n, &lim) in &self.max {
            if get(n) > lim {
                v.push(format!("{n}: {} > at most {lim}", get(n)));
            }
        }
        for (n, &lim) in &self.min {
            if get(n) < lim {
                v.push(format!("{n}: {} < at least {lim}", get(n)));
            }
        }
        for n in &self.forbid {
            if get(n) > 0 {
                v.push(format!("{n}: {} present, forbidden", get(n)));
            }
        }
        if let Some(m) = self.max_delegates {
            if delegates > m {
                v.push(format!("delegates: {delegates} > at most {m}"));
            }
        }
        v
    }
}

/// The XNNPACK payloads of a `.pte` file, in segment order.
pub fn pte_payloads(bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let payloads = serialize::pte::xnnpack_payloads(bytes).context("reading the .pte file")?;
    Ok(payloads.into_iter().map(|p| p.to_vec()).collect())
}

/// Gates one `.pte`: returns the report and whether it passed.
pub fn gate_pte(bytes: &[u8], limits: &Limits) -> anyhow::Result<(bool, String)> {
    let program = delegate::serialize::pte::parse(bytes).context("reading the .pte file")?;
    let payloads: Vec<&[u8]> = program.xnnpack().map(|d| d.bytes).collect();
    let mut out = String::new();
    if !program.operators.is_empty() {
        // What stays outside the delegates (a mean the partitioner refused, for one).
        let _ = writeln!(out, "operators outside delegates: {}", program.operators.join(", "));
    }
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    for (k, p) in payloads.iter().enumerate() {
        let g = serialize::load(p, &LoadLimits::lenient())
            .with_context(|| format!("delegate {k}: payload does not load"))?;
        let counts = serialize::node_counts(&g);
        let _ = writeln!(out, "delegate {k}: {} bytes, {} nodes {:?}", p.len(), g.nodes.len(), counts);
        for (n, c) in counts {
            *total.entry(n).or_insert(0) += c;
        }
    }
    let _ = writeln!(out, "total: {} delegates, {:?}", payloads.len(), total);
    let v = limits.violations(payloads.len(), &total);
    for x in &v {
        let _ = writeln!(out, "  VIOLATION {x}");
    }
    let _ = writeln!(out, "{}", if v.is_empty() { "gate: within limits" } else { "gate: limits exceeded" });
    Ok((v.is_empty(), out))
}

/// `harness gate FILE.pte ...`.
pub(super) fn run(pte: &Path, args: &GateArgs) -> anyhow::Result<ExitCode> {
    if args.bless {
        bail!("--bless applies to the golden table, not to a .pte file");
    }
    let limits = Limits::from_args(args)?;
    if limits.is_empty() {
        bail!("no limits given: use --max NODE=N, --min NODE=N, --forbid NODE, --max-delegates N or --limits FILE");
    }
    let bytes = std::fs::read(pte).with_context(|| format!("reading {}", pte.display()))?;
    let (ok, report) = gate_pte(&bytes, &limits)?;
    print!("{report}");
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_and_judge() {
        let args = GateArgs {
            max: vec!["XNNStaticTranspose=2".into()],
            forbid: vec!["XNNGlobalAvgPooling2d".into()],
            ..Default::default()
        };
        let l = Limits::from_args(&args).unwrap();
        let mut c = BTreeMap::new();
        c.insert("XNNStaticTranspose".to_string(), 2);
        assert!(l.violations(1, &c).is_empty());
        c.insert("XNNStaticTranspose".to_string(), 3);
        c.insert("XNNGlobalAvgPooling2d".to_string(), 1);
        let v = l.violations(1, &c);
        assert_eq!(v.len(), 2, "{v:?}");
        let bad = GateArgs { max: vec!["XNNTranspose=1".into()], ..Default::default() };
        assert!(Limits::from_args(&bad).is_err());
        let bad = GateArgs { max: vec!["XNNStaticTranspose".into()], ..Default::default() };
        assert!(Limits::from_args(&bad).is_err());
    }
}
