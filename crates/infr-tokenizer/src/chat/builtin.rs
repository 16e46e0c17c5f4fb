//! Built-in fallback templates for models without `tokenizer.chat_template`, and GGUF
//! metadata helpers.

use infr_gguf::Metadata;

use super::{ChatTemplate, ChatTemplateError};

/// ChatML, as llama.cpp's built-in `chatml` template renders it:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`.
pub const CHATML_TEMPLATE: &str = "\
{%- for message in messages %}
    {{- '<|im_start|>' ~ message.role ~ '\\n' ~ (message.content if message.content is not none else '') ~ '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}";

/// Gemma's turn format, as llama.cpp's built-in `gemma` template renders it: system messages
/// are merged into the next user turn (followed by a blank line), `assistant` becomes `model`,
/// content is trimmed, and each turn is `<start_of_turn>{role}\n{content}<end_of_turn>\n`;
/// the generation prompt is `<start_of_turn>model\n`.
///
/// No `<bos>` is emitted: the tokenizer adds it (`tokenizer.ggml.add_bos_token`), which is
/// what llama.cpp does too.
pub const GEMMA_TEMPLATE: &str = "\
{%- set ns = namespace(system='') %}
{%- for message in messages %}
    {%- set content = (message.content if message.content is not none else '') | trim %}
    {%- if message.role == 'system' %}
        {%- set ns.system = ns.system ~ content %}
    {%- else %}
        {%- set role = 'model' if message.role == 'assistant' else message.role %}
        {{- '<start_of_turn>' ~ role ~ '\\n' }}
        {%- if ns.system and role != 'model' %}
            {{- ns.system ~ '\\n\\n' }}
            {%- set ns.system = '' %}
        {%- endif %}
        {{- content ~ '<end_of_turn>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\\n' }}
{%- endif %}";

/// The fallback template llama.cpp would use for a model of architecture `arch` that ships no
/// template: Gemma's turn format for `gemma*` architectures (`gemma`, `gemma2`, `gemma3`,
/// `gemma3n`, ...), ChatML for everything else.
pub fn builtin_for_arch(arch: &str) -> ChatTemplate {
    if arch.to_ascii_lowercase().starts_with("gemma") {
        ChatTemplate::gemma()
    } else {
        ChatTemplate::chatml()
    }
}

/// The text of the special token whose id is stored under `id_key`
/// (e.g. `tokenizer.ggml.bos_token_id`), looked up in `tokenizer.ggml.tokens`.
/// `None` when the id key or the vocabulary is absent, or the id is out of range.
pub fn special_token_text(meta: &Metadata, id_key: &str) -> Result<Option<String>, ChatTemplateError> {
    let Some(id) = meta.u64(id_key)? else { return Ok(None) };
    let Some(tokens) = meta.array("tokenizer.ggml.tokens")? else { return Ok(None) };
    let text = usize::try_from(id).ok().and_then(|i| tokens.get(i)).and_then(|v| v.as_str()).map(str::to_owned);
    Ok(text)
}

/// Names of the extra templates a GGUF carries (`tokenizer.chat_template.<name>`), e.g.
/// `["tool_use", "rag"]`, in file order. Taken from `tokenizer.chat_templates` when present,
/// else from the keys themselves. The default template is not listed.
pub fn template_names(meta: &Metadata) -> Result<Vec<String>, ChatTemplateError> {
    if let Some(names) = meta.str_array("tokenizer.chat_templates")? {
        return Ok(names.into_iter().filter(|n| *n != "default").map(str::to_owned).collect());
    }
    Ok(meta
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("tokenizer.chat_template."))
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect())
}
