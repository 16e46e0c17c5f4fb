//! infr-tokenizer
