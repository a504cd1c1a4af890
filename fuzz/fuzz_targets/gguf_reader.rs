//! Any byte string given to the GGUF reader yields a header or an error: never a panic, a hang,
//! or an allocation larger than the input. Accepted headers must describe tensors that lie
//! inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plumb_gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = GgufFile::from_bytes(data.to_vec()) {
        for (key, value) in file.metadata().iter() {
            let _ = format!("{key}={value}");
        }
        for t in file.tensors() {
            let bytes = file.tensor_data(t);
            assert_eq!(bytes.len() as u64, t.size);
        }
    }
});
