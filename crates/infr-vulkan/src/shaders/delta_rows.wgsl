// What the delta-rule kernels (delta_net.wgsl, delta_chunked.wgsl) share: a workgroup's rows of
// a head's state, P lanes to a row, and the run of step rows that a workgroup starting at row
// t0 walks (each kernel declares `pc` with n_tokens and seq_off, and STEP, the step inputs).

var<workgroup> run_end: u32;

// Sum of `x` over the P lanes of a row.
fn row_sum(x: f32) -> f32 {
    var v = x;
{{ROW_SUM}}
    return v;
}

// `row_sum` of two values at once.
fn row_sum2(x: vec2<f32>) -> vec2<f32> {
    var v = x;
{{ROW_SUM}}
    return v;
}

// One past the last row of the sequence run that starts at row `t0`, or 0 where `t0` starts
// none (a later row of a run, or past the step); the same for every thread of the workgroup.
fn run_end_at(t0: u32, li: u32) -> u32 {
    if li == 0u {
        var e = 0u;
        if t0 < pc.n_tokens {
            let s = STEP[pc.seq_off + t0];
            if t0 == 0u || STEP[pc.seq_off + t0 - 1u] != s {
                e = t0 + 1u;
                while e < pc.n_tokens && STEP[pc.seq_off + e] == s {
                    e++;
                }
            }
        }
        run_end = e;
    }
    return workgroupUniformLoad(&run_end);
}
