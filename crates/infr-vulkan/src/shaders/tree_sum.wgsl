// Workgroup sums for kernels that declare `const WG` (a power of two) and
// `var<workgroup> red: array<f32, WG>` (or longer).

// The sum of every invocation's `s` over the workgroup, in one fixed tree order (a kernel's
// sums are the same bits on every device). Invocation `t` passes its own. A second call needs
// a barrier before it: this one's result is read from `red` until then.
fn tree_sum(t: u32, s: f32) -> f32 {
    red[t] = s;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w >>= 1u) {
        if t < w {
            red[t] += red[t + w];
        }
        workgroupBarrier();
    }
    return red[0];
}
