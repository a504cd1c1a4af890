//! `plumb synth`: writes a random-weight model of a real shape, for benchmarks on machines
//! where the real file cannot be copied in.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use plumb_gguf::GgufFile;
use plumb_hub::Progress;
use plumb_synth::{
    plan, write_arch_model, write_model, ArchModel, FileType, Options, Shape, SynthError,
};

#[derive(clap::Args)]
#[command(after_help = "\
The file has the exact tensors, metadata and llama.cpp tensor-type mix of the real model \
(q4_k_m: Q6_K for output.weight and about half of the attn_v and ffn_down layers, Q4_K \
elsewhere; q4_0: Q6_K for output.weight), with random weights (std 0.02, norms 1) from \
--seed: the same seed gives the same bytes. llama.cpp (llama-bench) reads it as plumb does. \
The tokenizer is a made-up SentencePiece vocabulary of the model's size with llama's <unk>, \
<s>, </s> and byte tokens, for llama3-8b too (whose real tokenizer is BPE): the text is \
meaningless, the speed is real. Sizes (q4_k_m / f16): tinyllama-1.1b 0.67 / 2.2 GB, \
llama2-7b 4.1 / 13.5 GB, llama3-8b 4.9 / 16.1 GB; the file is streamed to disk, never held \
in memory. `--shape tiny` is a 1 MB model for tests (4 layers, width 256, 512 tokens).

`--arch NAME --tokenizer-from MODEL.gguf` writes instead a tiny F32 model of one of the \
architectures plumb runs (llama3: rope_freqs; mistral; qwen3; qwen3-yarn; gemma2; phi3; mixtral; qwen3moe), with the \
tokenizer \
of MODEL.gguf, for checking plumb against llama.cpp (testdata/golden/synth-NAME); with \
--type q8_0, q4_0 or f16 its matrices have that type instead of F32.")]
pub struct Args {
    /// The model to imitate: tinyllama-1.1b, llama2-7b, llama3-8b (or tiny, for tests)
    #[arg(long, value_parser = parse_shape, required_unless_present = "arch")]
    shape: Option<Shape>,
    /// Tensor types, as llama-quantize names them: q4_k_m, q4_0, q8_0 or f16
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_file_type,
          required_unless_present = "arch")]
    file_type: Option<FileType>,
    /// A tiny model of this architecture instead: llama3, mistral, qwen3, qwen3-yarn, gemma2, phi3,
    /// phi3-short, mixtral, qwen3moe
    #[arg(long, value_parser = parse_arch_model, conflicts_with_all = ["shape", "layers"],
          requires = "tokenizer_from")]
    arch: Option<ArchModel>,
    /// With --arch: the GGUF model whose tokenizer the tiny model gets
    #[arg(long, value_name = "MODEL", requires = "arch")]
    tokenizer_from: Option<PathBuf>,
    /// The GGUF file to write (replaced if it exists)
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Seed of the weights
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep only the first N layers: a small file of the real width
    #[arg(long, value_name = "N")]
    layers: Option<usize>,
    /// Threads that make and quantize the weights [default: all cores]
    #[arg(short = 't', long)]
    threads: Option<usize>,
}

fn parse_shape(name: &str) -> Result<Shape, SynthError> {
    Shape::named(name)
}

fn parse_file_type(name: &str) -> Result<FileType, SynthError> {
    FileType::named(name)
}

fn parse_arch_model(name: &str) -> Result<ArchModel, SynthError> {
    ArchModel::named(name)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let (Some(model), Some(tokenizer)) = (&args.arch, &args.tokenizer_from) {
        let source = GgufFile::open(tokenizer)
            .with_context(|| format!("reading the tokenizer of {}", tokenizer.display()))?;
        write_arch_model(
            model,
            source.metadata(),
            &args.output,
            args.seed,
            args.file_type,
        )
        .with_context(|| format!("writing {}", args.output.display()))?;
        println!("{}", args.output.display());
        return Ok(());
    }
    let (Some(shape), Some(file_type)) = (args.shape, args.file_type) else {
        bail!("give --shape and --type, or --arch and --tokenizer-from");
    };
    let shape = match args.layers {
        Some(n) => shape.with_layers(n).context("--layers")?,
        None => shape,
    };
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let options = Options {
        shape,
        file_type,
        seed: args.seed,
        threads,
    };
    let bytes: u64 = plan(&shape, file_type).iter().map(|t| t.data_bytes()).sum();

    let progress = Progress::stderr();
    let what = format!(
        "{} {}, {} layers, seed {}, {threads} threads",
        shape.name,
        file_type.name(),
        shape.n_layer,
        args.seed
    );
    progress.status("synth", &what);
    let bar = progress.bytes_bar("synth", Some(bytes));
    let start = Instant::now();
    write_model(&options, &args.output, |n| bar.inc(n))
        .with_context(|| format!("writing {}", args.output.display()))?;
    bar.finish_and_clear();
    progress.status(
        "synth",
        &format!(
            "wrote {:.1} MB in {:.1} s",
            bytes as f64 / 1e6,
            start.elapsed().as_secs_f64()
        ),
    );
    println!("{}", args.output.display());
    Ok(())
}
