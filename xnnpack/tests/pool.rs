//! A pthreadpool whose workers run at the lowest priority (for more pool threads than CPUs):
//! its workers, and only they, are at nice 19, and a segment run on it gives the values of a
//! pool at normal priority, bit for bit.

use delegate::program::Step;
use delegate::runtime::kernels::View;
use delegate::runtime::plan::Owned;
use delegate::serialize::{load, write, LoadLimits};
use delegate::LoweringMode;
use reference::graph::{GraphBuilder, TensorSpec};

/// The nice value of each thread of this process named `name` (Linux: `/proc/self/task`).
fn nice_of(name: &str) -> Vec<i64> {
    let mut out = vec![];
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the parenthesised name: state is field 3, nice field 19.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        out.push(rest.split(' ').nth(16).unwrap().parse().unwrap());
    }
    out
}

fn own_nice() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

#[test]
fn a_low_priority_pool_runs_at_nice_19_with_the_same_values() {
    let Some(x) = xnnpack::for_test("a_low_priority_pool_runs_at_nice_19_with_the_same_values") else { return };
    let before = own_nice();
    let low = x.pool_low_priority(3).expect("a low-priority pool");
    assert_eq!(low.threads(), 3);
    assert_eq!(own_nice(), before, "the calling thread's priority changed");
    // pthreadpool starts its two workers from the helper thread, whose name and nice they keep.
    let workers = nice_of("xnnpack-pool");
    assert!(workers.len() >= 2, "workers {workers:?}");
    assert!(workers.iter().all(|&n| n == 19), "workers {workers:?}");

    // A mean over a row of 4096 values, split across the pool's threads.
    let g = GraphBuilder::new();
    let a = g.input("x", TensorSpec::f32(&[8, 4096]));
    let y = g.mean(a, &[1], false);
    let graph = g.finish(&[y]).unwrap();
    let program = delegate::lower::lower(&graph, LoweringMode::StaticMean).unwrap();
    let [Step::Delegate(d)] = program.steps.as_slice() else { panic!("one delegate segment: {:?}", program.steps) };
    let loaded = load(&write(&d.graph), &LoadLimits::default()).unwrap();
    let data: Vec<f32> = (0..8 * 4096).map(|i| ((i * 7919 % 1000) as f32) / 997.0 - 0.5).collect();
    let run = |pool: &xnnpack::ThreadPool| {
        let mut seg = xnnpack::compile::compile(x, &loaded, 1, pool, xnnpack::compile::FLAG_DONT_SPIN_WORKERS).unwrap();
        let out = seg.run(&[(View::F32(&data), &[8, 4096][..])], &mut []).unwrap();
        match &out[0].data {
            Owned::F32(v) => v.clone(),
            other => panic!("{other:?}"),
        }
    };
    let got = run(&low);
    let want = run(&x.pool(3).unwrap());
    assert_eq!(got.len(), 8);
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // And the values are the means (f32 accumulation of 4096 terms: within 1e-4 here).
    for (r, &m) in got.iter().enumerate() {
        let exact = data[r * 4096..(r + 1) * 4096].iter().map(|&v| v as f64).sum::<f64>() / 4096.0;
        assert!((m as f64 - exact).abs() < 1e-4, "row {r}: {m} vs {exact}");
    }
}
