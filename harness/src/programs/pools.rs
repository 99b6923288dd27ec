//! The `F.adaptive_avg_pool2d(x, 1)` rows of the program catalog: each pool row shares its
//! weights with the mean row it mirrors, so the golden table shows equal payload hashes.

use super::{conv, q_dq, Catalog, Family, Weights, Q_IN};
use reference::dtype::{ElemType, QuantParams};
use reference::graph::{Conv2dParams, TensorSpec};
use reference::tensor::Tensor;

/// `F.adaptive_avg_pool2d(x, 1)` heads (`to_edge` makes each the mean over H and W): each
/// shares its weights with the mean row named in `like`, so the golden table shows the
/// same payload hashes, and a 3-D pool is a rank-3 mean.
pub(super) fn pools(c: &mut Catalog) {
    use Family::Table;
    let t = ElemType::F32;
    c.add(
        Table,
        "pool_1x8x6x6".into(),
        "F.adaptive_avg_pool2d(x, 1) on 1x8x6x6 (the payload of gap_1x8x6x6)".into(),
        "pool",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.adaptive_avg_pool2d(x, [1, 1])]
        },
    );
    c.add(
        Table,
        "cl_pool_1x8x6x6".into(),
        "channels_last 1x8x6x6 -> F.adaptive_avg_pool2d(x, 1) (the payload of cl_gap_1x8x6x6)".into(),
        "cl_pool",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last());
            vec![g.adaptive_avg_pool2d(x, [1, 1])]
        },
    );
    c.add(
        Table,
        "conv_pool".into(),
        "conv2d(3->8, 3x3) -> AdaptiveAvgPool2d(1) on 1x3x8x8 (conv_gap's weights and payload)".into(),
        "conv_pool",
        "1x3x8x8".into(),
        t,
        |g, _| {
            let mut w = Weights::new("conv_gap");
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, &mut w);
            vec![g.adaptive_avg_pool2d(y, [1, 1])]
        },
    );
    for (name, pool) in [("qs8_conv_gap", false), ("qs8_conv_pool", true)] {
        let head = if pool { "AdaptiveAvgPool2d(1)" } else { "mean([2,3], keepdim=True)" };
        c.add(
            Table,
            name.into(),
            format!("qs8 conv2d(3->8, 3x3) -> {head} on 1x3x8x8 (one payload for both)"),
            "qs8_conv_gap",
            "1x3x8x8".into(),
            ElemType::Qs8,
            move |g, _| {
                let mut w = Weights::new("qs8_conv_gap");
                let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 3, 8, 8])), Q_IN);
                // PT2E's form: an int8 weight dequantized in the graph, an fp32 bias.
                let q_w = QuantParams { scale: 1.0 / 512.0, zero_point: 0 };
                let wf = w.uniform(8 * 27, 1.0 / 27f32.sqrt());
                let wq: Vec<i8> = wf.iter().map(|v| (v / q_w.scale).round().clamp(-127.0, 127.0) as i8).collect();
                let wt = g.dequantize(g.constant(Tensor::qs8(&[8, 3, 3, 3], wq, q_w)), q_w.scale, 0);
                let b = g.constant(w.tensor(&[8], 0.1, ElemType::F32));
                let y = q_dq(g, g.conv2d(x, wt, Some(b), Conv2dParams::default()), Q_IN);
                let m = if pool { g.adaptive_avg_pool2d(y, [1, 1]) } else { g.mean(y, &[2, 3], true) };
                vec![q_dq(g, m, Q_IN)]
            },
        );
    }
    c.add(
        Table,
        "pool_3d_8x6x6".into(),
        "F.adaptive_avg_pool2d(x, 1) on a 3-D 8x6x6 (a rank-3 mean: outside in main)".into(),
        "pool_3d",
        "8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[8, 6, 6]));
            vec![g.adaptive_avg_pool2d(x, [1, 1])]
        },
    );
}

#[cfg(test)]
mod tests {
    use super::super::find;

    #[test]
    fn pool_rows_lower_to_their_mean_rows_payloads() {
        for (pool, mean) in [
            ("pool_1x8x6x6", "gap_1x8x6x6"),
            ("cl_pool_1x8x6x6", "cl_gap_1x8x6x6"),
            ("conv_pool", "conv_gap"),
            ("qs8_conv_pool", "qs8_conv_gap"),
        ] {
            let (a, b) = (find(pool).unwrap().graph().unwrap(), find(mean).unwrap().graph().unwrap());
            for mode in delegate::LoweringMode::ALL {
                let (pa, pb) = (delegate::lower(&a, mode).unwrap(), delegate::lower(&b, mode).unwrap());
                assert_eq!(pa.summary.count("XNNGlobalAvgPooling2d"), Ok(1), "{pool} {mode}");
                assert_eq!(pa.steps, pb.steps, "{pool} vs {mean} {mode}");
            }
        }
    }
}
