//! Fuzz the GGUF parser: any byte string must parse or fail with an error, never panic,
//! hang or allocate without bound. Parsed files are walked fully (metadata accessors and
//! tensor bytes) to exercise the bounds checks behind them.
#![no_main]

#[path = "common/altstack.rs"]
mod altstack;

use infr_gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    altstack::install();
    if let Ok(f) = GgufFile::from_bytes(data.to_vec()) {
        for (k, v) in f.metadata().iter() {
            let _ = (k.len(), v.type_name(), v.as_u64(), v.as_f64(), v.as_str(), format!("{v}"));
            let _ = f.metadata().str_array(k);
        }
        for t in f.tensors() {
            let bytes = f.tensor_bytes(t);
            assert_eq!(bytes.len() as u64, t.size);
        }
    }
});
