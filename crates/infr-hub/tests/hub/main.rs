//! The hub client's integration tests, one test binary: downloads, offline use and errors
//! against a fake Hugging Face Hub on 127.0.0.1 (`support`), interop with the Python
//! `huggingface_hub` cache, and reference parsing.

mod support;

mod auth_offline;
mod download;
mod hostile;
mod python_interop;
mod refs;
