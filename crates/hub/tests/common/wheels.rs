//! Small fake wheels: zip files shaped like the catalog's (a payload over 1 MiB among stubs).

use std::io::Write;
use std::path::Path;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

pub const MIB: usize = 1 << 20;

/// A wheel holding `files` and the usual company of small files (`__init__.py`, metadata).
pub fn write_wheel(path: &Path, files: &[(&str, &[u8])]) {
    let mut zip = ZipWriter::new(std::fs::File::create(path).unwrap());
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let stubs: [(&str, &[u8]); 3] = [
        ("pkg/__init__.py", b"# stub\n"),
        ("pkg-1.0.dist-info/METADATA", b"Name: pkg\n"),
        ("pkg-1.0.dist-info/RECORD", b""),
    ];
    for (name, bytes) in stubs.iter().chain(files) {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}
