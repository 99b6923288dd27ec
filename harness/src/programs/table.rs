//! The lowering table's rows (issue 3): one program per row.

use super::*;

pub(super) fn table(c: &mut Catalog) {
    use Family::Table;
    let t = ElemType::F32;
    c.add(
        Table,
        "gap_1x8x6x6".into(),
        "x.mean([2,3], keepdim=True) on 1x8x6x6".into(),
        "gap",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "conv_gap".into(),
        "conv2d(3->8, 3x3) -> mean([2,3], keepdim=True) on 1x3x8x8".into(),
        "conv_gap",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            vec![g.mean(y, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "conv_mean_conv".into(),
        "conv(3->8, 3x3) -> mean(1, keepdim=True) -> conv(1->4, 3x3) on 1x3x8x8".into(),
        "conv_mean_conv",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            let m = g.mean(y, &[1], true);
            vec![conv(g, m, 1, 4, 3, 0, w)]
        },
    );
    c.add(
        Table,
        "conv_sub_mean".into(),
        "conv(3->8, 3x3) -> y - y.mean(1, keepdim=True) on 1x3x8x8".into(),
        "conv_sub_mean",
        "1x3x8x8".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 3, 8, 8]));
            let y = conv(g, x, 3, 8, 3, 0, w);
            vec![g.sub(y, g.mean(y, &[1], true))]
        },
    );
    c.add(
        Table,
        "cl_gap_1x8x6x6".into(),
        "channels_last 1x8x6x6 -> mean([2,3], keepdim=True)".into(),
        "cl_gap",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last());
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Table,
        "rmsnorm_1x16x256_table".into(),
        "RMSNorm over the last dim of 1x16x256".into(),
        "rmsnorm",
        "1x16x256".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 16, 256]));
            vec![rmsnorm(g, x, 256, ElemType::F32, w)]
        },
    );
    // A requantizing copy before a qs8 mean (the two requantization bugs found on
    // 2026-11-30): its converts must stay, in every mode.
    for (name, reshape) in [("qs8_requant_copy_mean", false), ("qs8_requant_reshape_mean", true)] {
        let what = if reshape { "a same-shape reshape" } else { "a same-layout memory-format copy" };
        c.add(
            Table,
            name.into(),
            format!("qs8 1x8x16 requantized through {what} (1/64 -> 1/32), then mean(-1)"),
            "qs8_requant",
            "1x8x16".into(),
            ElemType::Qs8,
            move |g, _| {
                let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 8, 16])), Q_IN);
                let c = if reshape { g.reshape(x, &[1, 8, 16]) } else { g.to_format(x, MemoryFormat::Contiguous) };
                let m = g.mean(q_dq(g, c, Q_OUT), &[-1], true);
                vec![q_dq(g, m, Q_IN)]
            },
        );
    }
    for (name, dims, what) in [("qs8_mean_inner", -1i64, "innermost"), ("qs8_mean_middle", 1, "middle")] {
        c.add(
            Table,
            name.into(),
            format!("qs8 q/dq-wrapped mean over the {what} dim of 1x8x16"),
            "qs8_mean",
            "1x8x16".into(),
            ElemType::Qs8,
            move |g, _| {
                let x = g.input("x", TensorSpec::f32(&[1, 8, 16]));
                let m = g.mean(q_dq(g, x, Q_IN), &[dims], true);
                vec![q_dq(g, m, Q_IN)]
            },
        );
    }
    c.add(
        Table,
        "mean_all_dims".into(),
        "x.mean([]) (every dim) on 1x8x6x6".into(),
        "mean_all",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[], true)]
        },
    );
    c.add(
        Table,
        "mean_dim3".into(),
        "x.mean([3], keepdim=True) on 1x8x6x6".into(),
        "mean_dim3",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[3], true)]
        },
    );
    c.add(
        Table,
        "mean_dim3_nokeep".into(),
        "x.mean([3], keepdim=False) on 1x8x6x6".into(),
        "mean_dim3_nokeep",
        "1x8x6x6".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 8, 6, 6]));
            vec![g.mean(x, &[3], false)]
        },
    );
    c.add(
        Table,
        "mean_dtype_arg".into(),
        "fp16 x.mean([-1], keepdim=True, dtype=float32) on 1x8x16 (B5's real trigger)".into(),
        "mean_dtype_arg",
        "1x8x16".into(),
        ElemType::F16,
        |g, _| {
            let x = g.input("x", TensorSpec::f16(&[1, 8, 16]));
            vec![g.mean_dtype(x, &[-1], true, ElemType::F32)]
        },
    );
}
