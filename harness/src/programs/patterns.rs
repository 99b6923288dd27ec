//! Extra patterns from the change's test list (§5 of the notes).

use super::*;

pub(super) fn patterns(c: &mut Catalog) {
    use Family::Pattern;
    let t = ElemType::F32;
    c.add(
        Pattern,
        "p1_add_gap".into(),
        "x + x -> mean([-1,-2], keepdim=True) on 1x5x4x4 (P1)".into(),
        "add_gap",
        "1x5x4x4".into(),
        t,
        |g, _| {
            let x = g.input("x", TensorSpec::f32(&[1, 5, 4, 4]));
            vec![g.mean(g.add(x, x), &[-1, -2], true)]
        },
    );
    c.add(
        Pattern,
        "p4_qs8_add_gap".into(),
        "qs8 x + x -> mean([2,3], keepdim=True) on 1x5x4x4 (P4)".into(),
        "qs8_add_gap",
        "1x5x4x4".into(),
        ElemType::Qs8,
        |g, _| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 5, 4, 4])), Q_IN);
            let s = q_dq(g, g.add(x, x), Q_IN);
            vec![q_dq(g, g.mean(s, &[2, 3], true), Q_IN)]
        },
    );
    for rank in 1..=6usize {
        let shape: Vec<usize> = (0..rank).map(|i| [2, 3, 4, 5, 3, 2][i]).collect();
        let lbl = label(&shape);
        c.add(
            Pattern,
            format!("p5_add_mean_rank{rank}"),
            format!("x + x -> mean([-1], keepdim=False) on {lbl} (P5)"),
            "add_mean",
            lbl,
            t,
            move |g, _| {
                let x = g.input("x", TensorSpec::f32(&shape));
                vec![g.mean(g.add(x, x), &[-1], false)]
            },
        );
    }
    c.add(
        Pattern,
        "p10_qs8_conv_mean_c".into(),
        "qs8 conv(3->8, 3x3) -> mean(1, keepdim=True) on 1x3x8x8 (P10)".into(),
        "qs8_conv_mean_c",
        "1x3x8x8".into(),
        ElemType::Qs8,
        |g, w| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 3, 8, 8])), Q_IN);
            let y = q_dq(g, conv(g, x, 3, 8, 3, 0, w), Q_IN);
            vec![q_dq(g, g.mean(y, &[1], true), Q_IN)]
        },
    );
    c.add(
        Pattern,
        "p11_qs8_cl_add_mean_c".into(),
        "qs8 channels_last 1x8x6x6 -> x + x -> mean(1, keepdim=True) (P11, B3)".into(),
        "qs8_cl_add_mean_c",
        "1x8x6x6".into(),
        ElemType::Qs8,
        |g, _| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 8, 6, 6]).channels_last()), Q_IN);
            let s = q_dq(g, g.add(x, x), Q_IN);
            vec![q_dq(g, g.mean(s, &[1], true), Q_IN)]
        },
    );
    c.add(
        Pattern,
        "p14_rmsnorm_dynamic".into(),
        "RMSNorm over the last dim of 1x(<=16)x256, dim 1 dynamic (P14)".into(),
        "rmsnorm_dynamic",
        "1x16x256".into(),
        t,
        |g, w| {
            let x = g.input("x", TensorSpec::f32(&[1, 16, 256]).dynamic(1));
            vec![rmsnorm(g, x, 256, ElemType::F32, w)]
        },
    );
    c.add(
        Pattern,
        "p15_fp16_mean_middle".into(),
        "fp16 mean(1, keepdim=True) on 1x8x16 (P15)".into(),
        "mean_middle",
        "1x8x16".into(),
        ElemType::F16,
        |g, _| {
            let x = g.input("x", TensorSpec::f16(&[1, 8, 16]));
            vec![g.mean(x, &[1], true)]
        },
    );
    c.add(
        Pattern,
        "p18_bf16_cl_gap".into(),
        "bf16 channels_last 1x8x6x6 -> mean([2,3], keepdim=True) (P18)".into(),
        "bf16_cl_gap",
        "1x8x6x6".into(),
        ElemType::Bf16,
        |g, _| {
            let x = g.input("x", TensorSpec::bf16(&[1, 8, 6, 6]).channels_last());
            vec![g.mean(x, &[2, 3], true)]
        },
    );
    c.add(
        Pattern,
        "b1_shared_dq_mean_conv".into(),
        "qs8: one dq feeds a mean(1) (first) and a conv (B1/B2 shape) on 1x3x8x8".into(),
        "shared_dq",
        "1x3x8x8".into(),
        ElemType::Qs8,
        |g, w| {
            let x = q_dq(g, g.input("x", TensorSpec::f32(&[1, 3, 8, 8])), Q_IN);
            let m = q_dq(g, g.mean(x, &[1], true), Q_IN);
            let y = q_dq(g, conv(g, x, 3, 8, 3, 0, w), Q_IN);
            vec![m, y]
        },
    );
}
