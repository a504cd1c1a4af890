//! The file types `plumb synth` writes, as llama-quantize names and numbers them.

use plumb_gguf::GgmlType;

use crate::SynthError;

/// A llama.cpp file type (`llama_ftype`): a default tensor type, which
/// [`tensor_type`](crate::tensor_type) varies per tensor as llama.cpp's mix does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)] // llama.cpp's names, which users type
pub enum FileType {
    Q4_K_M,
    Q4_0,
    Q8_0,
    F16,
}

impl FileType {
    pub const ALL: [FileType; 4] = [Self::Q4_K_M, Self::Q4_0, Self::Q8_0, Self::F16];

    /// The name on the command line (llama-quantize's, in lower case).
    pub fn name(self) -> &'static str {
        match self {
            Self::Q4_K_M => "q4_k_m",
            Self::Q4_0 => "q4_0",
            Self::Q8_0 => "q8_0",
            Self::F16 => "f16",
        }
    }

    pub fn named(name: &str) -> Result<FileType, SynthError> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| SynthError::UnknownFileType(name.to_owned()))
    }

    /// The `llama_ftype` number, which `general.file_type` holds.
    pub fn llama_ftype(self) -> u32 {
        match self {
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q8_0 => 7,
            Self::Q4_K_M => 15,
        }
    }

    /// The type of every matrix the mix does not single out (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        match self {
            Self::Q4_K_M => GgmlType::Q4_K,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::F16 => GgmlType::F16,
        }
    }
}
