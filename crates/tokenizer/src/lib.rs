//! Tokenizers (SentencePiece and byte-level BPE) and chat templates, from GGUF metadata.
