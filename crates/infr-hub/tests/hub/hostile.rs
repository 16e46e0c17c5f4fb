//! Hardening issue, defect 10: the hub client against hostile or broken endpoints. A
//! malformed `HF_ENDPOINT` fails at once instead of being retried as a network error, an
//! answer larger than the cap is refused as it arrives instead of buffered, and a listing that
//! pages forever stops with an error instead of silently.

use std::time::{Duration, Instant};

use infr_hub::{HubApi, HubError, HubOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn opts(endpoint: &str) -> HubOptions {
    HubOptions {
        endpoint: endpoint.to_owned(),
        max_retries: 5,
        retry_base_delay: Duration::from_secs(1),
        ..HubOptions::default()
    }
}

#[test]
fn malformed_endpoints_fail_at_once() {
    for (endpoint, says) in [("not a url", "not a URL"), ("file:///tmp/hub", "only http:// and https://")] {
        let t = Instant::now();
        let e = HubApi::new(opts(endpoint)).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains(says), "{endpoint}: {e}");
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}

/// A one-route-at-a-time HTTP server: `answer(path)` gives the head and body to send.
async fn serve(answer: fn(&str, &str) -> (String, Vec<u8>)) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", l.local_addr().unwrap());
    let base = addr.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { return };
            let base = base.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (head, body) = answer(&base, &path);
                let _ = s.write_all(head.as_bytes()).await;
                // Large bodies are sent in pieces; the client may hang up early.
                for chunk in body.chunks(1 << 16) {
                    if s.write_all(chunk).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_answers_are_refused() {
    let addr = serve(|_, _| {
        let n = infr_hub::api_limits::MAX_JSON_BYTES + 1;
        ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n".to_owned(), vec![b' '; n])
    })
    .await;
    let api = HubApi::new(opts(&addr)).unwrap();
    let e = api.repo_info("a/b", "main").await.err().unwrap();
    assert!(matches!(e, HubError::Protocol { .. }) && e.to_string().contains("larger than"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_pagination_stops_with_an_error() {
    let addr = serve(|base, path| {
        let body = if path.contains("/revision/") {
            format!(r#"{{"sha": "{SHA}", "siblings": []}}"#)
        } else {
            r#"[{"type": "file", "path": "x.gguf", "size": 1}]"#.to_owned()
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nLink: <{base}/api/models/a/b/tree/{SHA}?cursor=more>; rel=\"next\"\r\nConnection: close\r\n\r\n",
            body.len()
        );
        (head, body.into_bytes())
    })
    .await;
    let api = HubApi::new(opts(&addr)).unwrap();
    let e = api.repo_info("a/b", "main").await.err().unwrap();
    assert!(e.to_string().contains("pages"), "{e}");
}
