//! The server's integration tests, one test binary (one link of the HTTP stack instead of one
//! per file): each module drives the real server, or its accept loop, over HTTP.

#[path = "../support/load_client.rs"]
mod load_client;
#[path = "../support/server.rs"]
mod server;

mod diffusion_http;
mod gemma4_http;
mod harmony_template;
mod http;
mod hybrid_http;
mod limits;
mod load;
mod loading;
mod metrics_http;
mod qwen35_http;
mod reasoning_http;
mod response_format;
mod tools_http;
