// A routed pair's own expert input where the routing weight scales the input (Llama 4,
// `weight_before_ffn`): vec4 `w` of the pair rows (rows of `words` vec4s) is token
// p / pairs_per_token's row of X times pair p's weight (ROUTE[n_pairs + p], f32 bits). The
// includer declares X (vec4 rows), ROUTE and pc.pairs_per_token / pc.n_pairs.

fn pair_input_word(w: u32, words: u32) -> vec4<f32> {
    let p = w / words;
    return X[(p / pc.pairs_per_token) * words + w % words] * bitcast<f32>(ROUTE[pc.n_pairs + p]);
}
