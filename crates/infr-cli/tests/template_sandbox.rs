//! Hardening issue, defect 3: a chat template that builds a huge value (a list doubled forty
//! times: hundreds of GB in forty instructions, which fuel cannot stop) made the allocator
//! abort the whole process. Templates now render in a memory-capped worker process: the
//! request fails with a clear error and the program goes on.

use std::process::Command;

use infr_models::synth::{self, Shape, SynthPlan, SynthQuant};

/// A tiny model whose chat template is `template`.
fn model_with_template(name: &str, template: &str) -> std::path::PathBuf {
    let mut plan = SynthPlan::new(Shape::by_name("tiny-qwen3").unwrap(), SynthQuant::Q8_0, None).unwrap();
    plan.metadata.insert("tokenizer.chat_template", infr_gguf::Value::String(template.into()));
    let path = std::env::temp_dir().join(format!("infr-{name}-{}.gguf", std::process::id()));
    synth::write(&plan, 1, &path, &mut |_, _| {}).unwrap();
    path
}

#[test]
fn a_template_exhausting_memory_fails_the_render_not_the_process() {
    let doubling = "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}\
                    {% endfor %}{{ messages[0]['content'] }}";
    let macro_doubling = "{% macro f(x, n) %}{% if n > 0 %}{{ f(x ~ x, n - 1) }}{% else %}{{ x|length }}\
                          {% endif %}{% endmacro %}{{ f('ab', 40) }}";
    for (name, template) in [("list-doubling", doubling), ("string-doubling", macro_doubling)] {
        let path = model_with_template(name, template);
        let out = Command::new(env!("CARGO_BIN_EXE_infr"))
            .args(["run", path.to_str().unwrap(), "hello", "-n", "1"])
            .output()
            .expect("runs infr");
        let err = String::from_utf8_lossy(&out.stderr);
        // A clean error exit, not an abort (SIGABRT, exit 134).
        assert_eq!(out.status.code(), Some(1), "{name}: {:?}\n{err}", out.status);
        assert!(err.contains("renderer died") && err.contains("GiB of address space"), "{name}: {err}");
        let _ = std::fs::remove_file(&path);
    }
}

/// A template within its fuel and memory whose instructions are each expensive (a string grown
/// by 100 kB per step, copied each time: hundreds of GB of copying) meets the render deadline
/// instead of stalling every request behind it.
#[test]
fn a_slow_template_meets_the_render_deadline() {
    let slow = "{% set ns = namespace(s='a' * 100000) %}{% for i in range(3000) %}\
                {% set ns.s = ns.s ~ ns.s[:100000] %}{% endfor %}{{ ns.s|length }}";
    let path = model_with_template("slow", slow);
    let t = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["run", path.to_str().unwrap(), "hello", "-n", "1"])
        .output()
        .expect("runs infr");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ran past 10 s"), "{err}");
    assert!(t.elapsed().as_secs() < 60, "took {:?}", t.elapsed());
    let _ = std::fs::remove_file(&path);
}

/// The same program renders a sane template as before.
#[test]
fn a_sane_template_renders() {
    let path = model_with_template("sane", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
    let out = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["run", path.to_str().unwrap(), "hello", "-n", "1"])
        .output()
        .expect("runs infr");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(&path);
}
