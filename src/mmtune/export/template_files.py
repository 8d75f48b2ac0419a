"""The chat template where every server and converter looks for it.

transformers >= 4.47 saves a tokenizer's (or processor's) chat template as its own file, `chat_template.jinja`,
and no longer inside tokenizer_config.json. Readers that predate that file look only in tokenizer_config.json:
TGI answers `/v1/chat/completions` with "template not found" (text-generation-inference#3247), and
convert_hf_to_gguf.py with an older gguf-py (ik_llama.cpp#668) writes a GGUF without `tokenizer.chat_template`,
which Ollama and llama.cpp then prompt with a generic template: a fine-tuned model that rambles and never stops
(ollama#6823; buriedsignals/spotlight#32 inlined the file by hand before converting). An export therefore carries
the template in both places, the same text: transformers reads the .jinja file first, so what it loads is
unchanged."""

from __future__ import annotations

import json
from pathlib import Path

TEMPLATE_FILE = "chat_template.jinja"
TOKENIZER_CONFIG = "tokenizer_config.json"


def inline_chat_template(folder: Path) -> bool:
    """Copy `chat_template.jinja` into tokenizer_config.json's `chat_template` where it is missing there; True when
    the folder was changed. A folder without either file (no tokenizer saved) is left alone."""
    template, config = Path(folder) / TEMPLATE_FILE, Path(folder) / TOKENIZER_CONFIG
    if not (template.is_file() and config.is_file()):
        return False
    data = json.loads(config.read_text(encoding="utf-8"))
    if data.get("chat_template"):
        return False  # a template there already (a tokenizer saved by an older transformers): it is the one read
    data["chat_template"] = template.read_text(encoding="utf-8")
    config.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return True
